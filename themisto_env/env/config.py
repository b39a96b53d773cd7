"""The env's options: [`EnvConfig`][themisto_env.env.EnvConfig] (``gymnasium.make(id, **options)``), the task's
and its kernel's (one `KernelSpec`), opened with its dataset by `env_config_and_dataset`; and the warning given
once when model-written code is about to run where it can reach the host's files."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from themisto_env.data.samples import SampleRule, TaskName
from themisto_env.errors import ConfigError, options_error
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.launcher import launcher_class
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.scoring.rule import RewardWeights, ScoringRule

__all__ = [
    "KERNEL_OPTIONS",
    "MODEL_CODE_TIMEOUT_S",
    "EnvConfig",
    "ObservationMode",
    "OneLineOptions",
    "env_config_and_dataset",
    "renamed_option",
    "warn_unisolated",
]

log = logging.getLogger("themisto_env")
_WARNED_UNISOLATED: set[str] = set()

#: The longest model-written code may run (a prediction under the execution score, a tried cell).
MODEL_CODE_TIMEOUT_S = 30.0

ObservationMode = Literal["static", "full", "tools"]


def warn_unisolated(backend: str, what: str) -> None:
    """Once per process and backend: model-written code is about to run where it can reach the host's
    files (the local backend: everything; bwrap: reads only, the dataset and its targets included)."""
    launcher = launcher_class(backend)
    if launcher.hides_host_files or backend in _WARNED_UNISOLATED:
        return
    _WARNED_UNISOLATED.add(backend)
    reach = (
        "which isolates the process but lets it read your files (the dataset with its targets, the snapshots)"
        if launcher.isolated
        else "which is not isolated (it runs as you, with your files and network)"
    )
    log.warning(
        "%s runs model-written code on the %s backend, %s; use --backend docker for code you do not trust.",
        what,
        backend,
        reach,
    )


def renamed_option(data: Any, old: str, new: str) -> Any:
    """Options with ``old`` (a deprecated name) given as ``new``, with a warning; both given is an error.

    Raises:
        ValueError: Both names were given.
    """
    if isinstance(data, Mapping) and old in data:
        if new in data:
            raise ValueError(f"{old} is the old name of {new}: give only {new}")
        warnings.warn(f"the option {old!r} is deprecated: it is now {new!r}", DeprecationWarning, stacklevel=2)
        data = {new if key == old else key: value for key, value in data.items()}
    return data


class OneLineOptions(BaseModel):
    """An options model whose invalid options are one `ConfigError` line naming each and the nearest valid
    name or value (`options_error`), not pydantic's message of several lines (the error's ``errors`` keep
    pydantic's, for callers that name the options their own way: a config file's path, ``env.``)."""

    #: What the options are called in the message (``invalid environment options: ...``).
    options_label: ClassVar[str] = "options"

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            line = f"invalid {self.options_label}: {options_error(exc.errors(), type(self))}"
            raise ConfigError(line, errors=exc.errors()) from None


#: The kernel's options an env also takes flat (``backend="docker"``): each goes into its ``kernel`` spec.
KERNEL_OPTIONS = ("backend", "fork", "warm_kernels", "limits", "environment", "snapshot_dir")


class EnvConfig(OneLineOptions):
    """Options of a Themisto environment (``gymnasium.make(id, **options)``): the task's, and the kernel's
    as one value (``kernel=KernelSpec("docker", fork=False)``). The kernel's options are also taken flat
    (``backend="docker"``, `KERNEL_OPTIONS`); ``config.backend`` reads ``config.kernel.backend``.

    Attributes:
        task: ``next-cell`` or ``output``.
        dataset: A built trajectory dataset folder; None uses the bundled data (built on first use). The
            env itself also takes an open [`Dataset`][themisto_env.replay.Dataset] here (shared with
            other envs and callers; the config then holds its folder), or one side of a split.
        split: Serve only one side of the dataset's split: ``train``, ``test`` or ``NAME:train`` (see
            [`view`][themisto_env.replay.Dataset.view]); a sample of the other side is refused
            ([`SplitError`][themisto_env.errors.SplitError]). None: the whole dataset.
        observation: ``static`` (history), ``full`` (history + every variable and memory), ``tools``
            (history; the agent queries the state with tool calls).
        history_length: How many recent executions the observation shows.
        tool_budget: Tool calls allowed per sample.
        tool_cost: Reward subtracted per tool call.
        reward: Weights of the metrics in the reward.
        execution_score: Also score a next-cell prediction by running it, in a disposable kernel (use
            the docker backend).
        attempts: Attempts per sample (pass@k): the agent predicts the sample this many times, each
            attempt scored, and the episode moves on after the last. ``info["draw"]`` is the attempt the
            env now waits for (from 0); the step that scores one says which in ``info["scored_draw"]``.
            ``samples`` is its old, deprecated name.
        lazy_state: Serve a sample's state only when the live state is needed; False serves each sample
            as it begins.
        sample_rule: Which steps are samples.
        max_output_chars: Cap of one output in the history.
        max_text_chars: Cap of each text field of the observation.
        kernel: The env's kernels ([`KernelSpec`][themisto_env.sandbox.KernelSpec], a mapping of its fields
            in a config file's ``kernel:`` block):

            - ``backend``: ``local``, ``bwrap`` or ``docker``;
            - ``fork``: fork kernels, and copies of a sample's state, from a warm template process instead
              of starting a kernel and restoring a snapshot into it (default True; where a state cannot be
              forked it is served the old way, and ``info["state"]["served_by"]`` says which way);
            - ``warm_kernels``: started kernels kept ready (the dataset's imports preloaded); unused where
              kernels are forked;
            - ``limits``: the sandbox limits;
            - ``environment``: the kernel environment (``themisto kernel-env``): None uses the one the
              dataset was built in, ``default`` the tool's own Python, else a name or id;
            - ``snapshot_dir``: the snapshot store; None: the dataset's own, else the cache's.
    """

    model_config = ConfigDict(extra="forbid")
    options_label: ClassVar[str] = "environment options"
    #: Names taken beside the fields (and offered as the nearest name of a misspelt option).
    flat_options: ClassVar[tuple[str, ...]] = KERNEL_OPTIONS

    task: TaskName = "next-cell"
    dataset: str | None = None
    split: str | None = None
    observation: ObservationMode = "tools"
    history_length: int = Field(10, ge=0)
    tool_budget: int = Field(5, ge=0)
    tool_cost: float = Field(0.01, ge=0)
    reward: RewardWeights = Field(default_factory=RewardWeights)
    execution_score: bool = False
    attempts: int = Field(1, ge=1)
    lazy_state: bool = True
    sample_rule: SampleRule = Field(default_factory=SampleRule)
    max_output_chars: int = Field(1500, ge=100)
    max_text_chars: int = Field(16000, ge=1000)
    kernel: KernelSpec = Field(default_factory=lambda: KernelSpec(fork=True))

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        data = renamed_option(data, "samples", "attempts")
        data = _without_ray(data)
        if not isinstance(data, Mapping) or not set(KERNEL_OPTIONS) & set(data):
            return data
        flat = {key: data[key] for key in KERNEL_OPTIONS if key in data}
        rest = {key: value for key, value in data.items() if key not in flat}
        kernel = rest.get("kernel")
        if isinstance(kernel, KernelSpec):
            rest["kernel"] = dataclasses.replace(kernel, **{k: _kernel_value(k, v) for k, v in flat.items()})
        else:
            rest["kernel"] = {**(kernel if isinstance(kernel, Mapping) else {}), **flat}
        return rest

    @field_validator("kernel", mode="before")
    @classmethod
    def _kernel_fields(cls, value: object) -> object:
        """A config file's mapping, its values as the spec takes them (a mapping of limits or of
        launcher options); the env forks unless told not to."""
        if isinstance(value, Mapping):
            return {"fork": True, **{key: _kernel_value(key, item) for key, item in _without_ray(value).items()}}
        if isinstance(value, KernelSpec) and value.fork is None:
            return dataclasses.replace(value, fork=True)
        return value

    @property
    def backend(self) -> str:
        """``kernel.backend``."""
        return self.kernel.backend

    def scoring_rule(self) -> ScoringRule:
        """The options that enter the reward: weights, tool cost, execution score (docs/reward.md)."""
        return ScoringRule(weights=self.reward, tool_cost=self.tool_cost, execution_score=self.execution_score)


def _without_ray(options: Any) -> Any:
    """Options without the retired ``ray`` option: ``None``, which configs and inspect logs saved before it
    went hold, is dropped; a placement is refused, naming what took its place.

    Raises:
        ValueError: ``ray`` is set.
    """
    if not isinstance(options, Mapping) or "ray" not in options:
        return options
    if options["ray"] is not None:
        raise ValueError(
            "ray: kernels in Ray actors are gone; run `themisto serve` where the kernels should run (docs/ray.md)"
        )
    return {key: value for key, value in options.items() if key != "ray"}


def _kernel_value(key: str, value: Any) -> Any:
    """A kernel option's value as `KernelSpec` takes it."""
    if key == "limits" and isinstance(value, Mapping):
        return SandboxLimits(**value)
    if key == "launcher_options" and isinstance(value, Mapping):
        return tuple(sorted(value.items()))
    return value


def env_config_and_dataset(options: Mapping[str, Any]) -> tuple[EnvConfig, Dataset]:
    """The env config of ``options`` and its dataset, opened ([`Dataset.open`][themisto_env.replay.Dataset.open], cached
    per process); an open [`Dataset`][themisto_env.replay.Dataset] given as ``dataset`` is used as it is.

    Raises:
        ConfigError: An option is invalid.
        DataError: The dataset folder is missing or not a dataset this package reads.
    """
    given = options.get("dataset")
    opened = given if isinstance(given, Dataset) else None
    if opened is not None:
        options = {**options, "dataset": str(opened.path)}
        label, asked = opened.split_label, options.get("split")
        if label is not None and asked is not None and asked != label:
            raise ConfigError(
                f"the dataset given is the {label or 'unsaved'!r} side of a split; split={asked!r} asks for another"
            )
        if label:  # a named side travels in the config (worker processes open it by name)
            options["split"] = label
        elif asked is not None:
            opened = opened.view(asked)
    try:
        config = EnvConfig(**options)  # a ConfigError of one line naming the option and the nearest valid one
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"invalid environment options: {exc}") from exc
    dataset = opened or Dataset.open(config.dataset, backend=config.backend, split=config.split)
    if config.kernel.snapshot_dir is None and dataset.snapshot_dir is not None:  # an exported dataset's own snapshots
        kernel = dataclasses.replace(config.kernel, snapshot_dir=str(dataset.snapshot_dir))
        config = config.model_copy(update={"kernel": kernel})
    return config, dataset
