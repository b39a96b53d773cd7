"""Experiment configs: what a run does, as pure data validated by pydantic (unknown keys are errors).

A config is a YAML or JSON file (``configs/*.yaml``) or command-line options (``themisto run --agent ...``),
read by [`load_run_config`][themisto_env.run.load_run_config] into a [`RunConfig`][themisto_env.run.RunConfig]. Code is
chosen by registered name (the agent, the backend, the executor), never written in a config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import ConfigDict, Field, field_validator, model_validator

from themisto_env.data.samples import SelectionOrder, TaskName
from themisto_env.env.config import OneLineOptions, renamed_option
from themisto_env.errors import ConfigError, options_error

ObservationName = Literal["static", "full", "tools"]
"""The env's observation modes (``themisto_env.env.config.ObservationMode``)."""


class RunConfig(OneLineOptions):
    """What to run. Pure data: code is chosen by registered name (``agent``).

    Attributes:
        agent: Registered agent name (``themisto agents``; ``themisto_env.agents.registry.AGENTS``), an agent of the
            ``themisto_env.agents`` entry-point group, or ``package.module:Class``.
        agent_options: Keyword arguments for the agent's factory.
        model: ``PROVIDER/NAME`` for the LLM agents (``openai/gpt-4o-mini``, ``anthropic/claude-3-5-haiku-latest``,
            ``ollama/qwen2.5-coder:7b``, ``fake``); sets the agent's ``provider`` and ``model`` options.
        base_url: The provider's endpoint (an OpenAI-compatible server, a proxy).
        model_args: Further model arguments (``-M temperature=0``), passed to the provider's chat model.
        task: ``next-cell`` or ``output``.
        observation: Observation mode; None uses the agent's own (or ``static``).
        backend: Sandbox backend.
        data: A built dataset folder; None uses the bundled data.
        split: Run only one side of the dataset's split (``test``, ``train``, ``NAME:test``; see
            ``themisto data split``); None: every sample.
        limit: Run at most this many samples: spread over the trajectories by a seeded selection (the same
            as the inspect task's and the TRL export's: `select_samples`).
        selection: ``spread`` (default) or ``first`` (the first ``limit`` samples in dataset order).
        selection_seed: The seed of the ``spread`` selection.
        sample_ids: A file of the sample ids to run (one a line, or a ``results.jsonl``); ``limit`` then
            applies among them.
        workers: Worker processes (or Ray actors), each with its own env and kernel.
        ray: None runs on this machine; ``local`` starts a private local Ray instance; ``auto`` or an
            address (``HOST:6379``, ``ray://HOST:10001``) joins a running Ray cluster. Episodes are then
            spread over ``workers`` Ray actors (`themisto_env.run.executors.ray_actors`).
        attempts: Attempts per sample (pass@k): the agent predicts each sample K times. With K > 1 each
            row carries its K attempts (``draws``) and the summary reports ``pass_at_k`` (with ``env:
            {execution_score: true}``) and ``best_of_k``. ``samples`` is its old, deprecated name.
        max_retries: Retries of a failed model call (LLM agents; None: the agent's default, 5).
        fail_on_error: Stop the run when more than this fraction of the samples done have model errors
            (judged after ``FAIL_ON_ERROR_MIN_SAMPLES`` samples); None never stops.
        max_connections: Model calls in flight at once, over the whole run (LLM agents; episodes run
            concurrently, each with its own kernel); None: one episode at a time per worker.
        cache: An SQLite file caching model replies (keyed by model, parameters and messages): a rerun
            is reproducible and makes no call.
        env: Further environment options (see ``EnvConfig``).

    A ``kernel:`` block (the env's kernel options: ``fork``, ``warm_kernels``, ``limits``, ``environment``,
    ``snapshot_dir``, ...) goes to the env as ``env.kernel``; a ``backend`` in it is the run's ``backend``.
    """

    model_config = ConfigDict(extra="forbid")
    options_label: ClassVar[str] = "run options"

    agent: str = "repeat-previous"
    agent_options: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    base_url: str | None = None
    model_args: dict[str, Any] = Field(default_factory=dict)
    task: TaskName = "next-cell"
    observation: ObservationName | None = None
    backend: str = "local"
    data: str | None = None
    split: str | None = None
    limit: int | None = Field(None, ge=1)
    selection: SelectionOrder = "spread"
    selection_seed: int = 0
    sample_ids: str | None = None
    workers: int = Field(1, ge=1)
    ray: str | None = None
    attempts: int = Field(1, ge=1)
    max_retries: int | None = Field(None, ge=0)
    fail_on_error: float | None = Field(None, ge=0, le=1)
    max_connections: int | None = Field(None, ge=1)
    cache: str | None = None
    env: dict[str, Any] = Field(default_factory=dict)

    @field_validator("model")
    @classmethod
    def _provider_and_name(cls, value: str | None) -> str | None:
        if value is not None:
            provider, _, name = value.partition("/")
            if not provider or (provider not in ("fake",) and not name):
                raise ValueError(f"give the model as PROVIDER/NAME (e.g. openai/gpt-4o-mini), got {value!r}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return _kernel_block(renamed_option(data, "samples", "attempts"))

    @model_validator(mode="after")
    def _one_source_per_option(self) -> RunConfig:
        if {"attempts", "samples"} & set(self.env):
            raise ValueError("set the attempts per sample with attempts (--attempts), not in env")
        if self.ray is not None and self.max_connections is not None:
            raise ValueError(
                "max_connections (--max-connections) runs episodes concurrently in local processes; "
                "Ray actors run theirs one at a time: use one or the other"
            )
        if self.model is not None and {"provider", "model", "chat_model"} & set(self.agent_options):
            raise ValueError("give the model either as model (--model) or in agent_options, not both")
        return self

    def provider_and_name(self) -> tuple[str | None, str | None]:
        """``(provider, name)`` of ``model`` (or of ``agent_options``), ``(None, None)`` without a model."""
        if self.model is not None:
            provider, _, name = self.model.partition("/")
            return provider, name or None
        return self.agent_options.get("provider"), self.agent_options.get("model")

    def agent_kwargs(self) -> dict[str, Any]:
        """The keyword arguments the agent's factory gets: ``agent_options`` plus the model options."""
        kwargs = dict(self.agent_options)
        if self.model is not None:
            kwargs["provider"], kwargs["model"] = self.provider_and_name()
            if kwargs["model"] is None:
                del kwargs["model"]
        if self.base_url is not None:
            kwargs["base_url"] = self.base_url
        if self.cache is not None:
            kwargs["cache"] = self.cache
        return {**kwargs, **self.model_args}


def _kernel_block(data: Any) -> Any:
    """A run config's ``kernel:`` block (the env's kernel options: ``themisto_env.sandbox.KernelSpec``'s
    fields) as the env's ``env.kernel``, its ``backend`` as the run's own ``backend``.

    Raises:
        ValueError: The backend is given twice, or the kernel block twice.
    """
    if not isinstance(data, Mapping):
        return data
    env = data.get("env") or {}
    if "kernel" in data and isinstance(env, Mapping) and "kernel" in env:
        raise ValueError("give the kernel options once: in kernel:, not also in env.kernel")
    kernel = data["kernel"] if "kernel" in data else (env.get("kernel") if isinstance(env, Mapping) else None)
    if not isinstance(kernel, Mapping):
        return data
    data = {key: value for key, value in data.items() if key != "kernel"}
    kernel = dict(kernel)
    if "backend" in kernel:
        backend = kernel.pop("backend")
        if data.get("backend", backend) != backend:
            raise ValueError(f"the backend is given twice: backend {data['backend']!r}, kernel.backend {backend!r}")
        data["backend"] = backend
    data["env"] = {**env, "kernel": kernel}
    return data


def parse_model_args(pairs: list[str], *, flag: str = "-M") -> dict[str, Any]:
    """``["temperature=0", "stop=[END]"]`` -> ``{"temperature": 0, "stop": ["END"]}``: values are read as
    JSON or YAML flow collections (``0`` an int, ``1e3`` a float, ``true`` a bool), anything else as text
    (``abc``, ``no``, ``2024-01-01`` stay strings).

    Args:
        pairs: The ``KEY=VALUE`` pairs.
        flag: The option that gave them, for the error (``-M``, ``-K``).

    Raises:
        ConfigError: A pair without ``=``.
    """
    args: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            example = "temperature=0" if flag == "-M" else "fork=false"
            raise ConfigError(f"{flag} takes key=value (e.g. {flag} {example}), got {pair!r}")
        args[key.strip()] = _model_arg(value)
    return args


def _model_arg(value: str) -> Any:
    """A -M value: JSON (numbers, true/false/null, quoted strings, lists, objects), a YAML flow collection
    (``[END, STOP]``, ``{api-key: X}``), or else the text itself (``no`` stays ``"no"``)."""
    try:
        return json.loads(value)
    except ValueError:
        pass
    if value.strip()[:1] in ("[", "{"):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            pass
    return value


def read_config_file(path: str | Path | None) -> dict[str, Any]:
    """A config file's keys (YAML, or JSON by its suffix); {} for None.

    Raises:
        ConfigError: The file is unreadable, or not a mapping.
    """
    if path is None:
        return {}
    path = Path(path)
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text) or {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a mapping of keys to values")
    return data


def load_run_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a run config (or the defaults), apply command-line overrides, validate.

    Raises:
        ConfigError: The file is unreadable, or a key is unknown or a value invalid (named in the message).
    """
    data = read_config_file(path)
    overrides = dict(overrides or {})
    if overrides.get("model_args"):  # -M adds to the file's model arguments
        overrides["model_args"] = {**(data.get("model_args") or {}), **overrides["model_args"]}
    data.update(overrides)
    try:
        config = RunConfig(**data)
    except ConfigError as exc:
        line = options_error(exc.errors, RunConfig)
        raise ConfigError(f"{path or 'run options'}: {line}", errors=exc.errors) from None
    check_env_options(config.env, path)
    return config


def check_env_options(env: dict[str, Any], path: str | Path | None = None) -> None:
    """Check a config's ``env:`` options against the env's ([`EnvConfig`][themisto_env.env.EnvConfig]), so
    that a typo is one line naming the file and the key (with the nearest option), before anything runs.

    Raises:
        ConfigError: An unknown option or an invalid value.
    """
    from themisto_env.env.config import EnvConfig

    try:
        EnvConfig(**env)
    except ConfigError as exc:
        line = options_error(exc.errors, EnvConfig, prefix="env.")
        raise ConfigError(f"{path or 'run options'}: {line}", errors=exc.errors) from None


__all__ = ["RunConfig", "check_env_options", "load_run_config", "parse_model_args", "read_config_file"]
