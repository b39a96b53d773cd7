"""A task's samples as single-turn training rows: prompt, target, sample id and metadata.

Each row is what the env shows the agent at that sample (`sample_observation`, as
[`ThemistoEnv`][themisto_env.env.ThemistoEnv] shows it: computed without a kernel in ``static`` mode, dumped
from a served state in ``full`` mode), turned into a prompt in the LLM agents' wording, with the text to
predict. The ``target`` column is for the reward function (TRL passes every column but ``prompt`` to it);
the model never sees it. ``tools`` mode needs several turns: the env itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from themisto_env.data.samples import Sample, TaskName, select_samples
from themisto_env.errors import ConfigError, InfrastructureError, import_extra

if TYPE_CHECKING:
    from themisto_env.env.config import EnvConfig
    from themisto_env.replay.dataset import Dataset

PromptFormat = Literal["chat", "text"]


def observation_prompt(
    observation: Mapping[str, Any],
    task: TaskName,
    mode: str = "static",
    *,
    prompt_format: PromptFormat = "chat",
    templates: str | Path | None = None,
) -> list[dict[str, str]] | str:
    """The prompt for an env observation, worded as the LLM agents word it.

    Args:
        observation: An observation of [`ThemistoEnv`][themisto_env.env.ThemistoEnv] (``history``, ``cell``,
            ``runtime``, ``tools_left``).
        task: ``next-cell`` or ``output``.
        mode: The observation mode (``static``, ``full`` or ``tools``): which sections the prompt has.
        prompt_format: ``chat`` gives TRL's conversational form (a system and a user message);
            ``text`` gives one string (system text, blank line, user text).
        templates: A prompt template file (see ``agents/prompts/default.yaml``); None for the bundled one.

    Returns:
        A list of messages (``chat``) or a string (``text``).
    """
    from themisto_env.agents.prompting import load_prompts

    prompts = load_prompts(templates)
    system = prompts.system_text(task)
    user = prompts.user_text(observation, task, mode)  # type: ignore[arg-type]
    if prompt_format == "chat":
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if prompt_format == "text":
        return f"{system}\n\n{user}\n"
    raise ConfigError(f"prompt_format must be 'chat' or 'text', got {prompt_format!r}")


def export_samples(
    task: TaskName = "next-cell",
    observation: str = "static",
    *,
    prompt_format: PromptFormat = "chat",
    templates: str | Path | None = None,
    limit: int | None = None,
    selection_seed: int = 0,
    sample_ids: Sequence[str] | None = None,
    **env_options: Any,
) -> list[dict[str, Any]]:
    """The samples of a task as training rows, in the env's sample order.

    Args:
        task: ``next-cell`` or ``output``.
        observation: ``static`` (history; no kernel needed) or ``full`` (history and the runtime dump;
            each sample's state is served from the snapshots, as the env serves it).
        prompt_format: ``chat`` (messages) or ``text`` (one string); see
            `observation_prompt`.
        templates: A prompt template file; None for the bundled one.
        limit: At most this many samples, spread over the trajectories: the samples of ``themisto run
            --limit N`` (`select_samples`).
        selection_seed: The seed of that selection (``themisto run --selection-seed``).
        sample_ids: Only these samples (``themisto run --sample-ids``:
            `read_sample_ids` reads a file of them).
        **env_options: Further [`EnvConfig`][themisto_env.env.EnvConfig] options (``dataset``: a folder or an
            open [`Dataset`][themisto_env.replay.Dataset]; ``backend``, ``history_length``,
            ``sample_rule``, ``snapshot_dir``, ...).

    Returns:
        One dict per sample: ``prompt`` (messages, or a string with ``prompt_format="text"``), ``target``,
        ``sample_id``, ``task``, ``trajectory_id``, ``step``, ``observation_mode``, the observation's
        ``history``, ``cell`` and ``runtime``, and ``metadata`` (``notebook_name``, ``dataset``,
        ``history_length``, ...).

    Raises:
        ConfigError: ``observation`` is ``tools`` or unknown, or an env option is invalid.
    """
    from themisto_env.env.config import env_config_and_dataset

    if observation not in ("static", "full"):
        raise ConfigError(
            f"single-turn export supports observation 'static' or 'full', not {observation!r}; "
            "tool use needs several turns: use the env itself (gymnasium.make_vec for several copies)"
        )
    config, dataset = env_config_and_dataset({**env_options, "task": task, "observation": observation})
    samples = dataset.samples(config.task, config.sample_rule)
    samples = select_samples(samples, limit, seed=selection_seed, sample_ids=sample_ids)
    observations = _observations(config, dataset, samples)
    rows = []
    for sample in samples:
        obs = observations[sample.id]
        trajectory = dataset.trajectories[sample.trajectory_id]
        rows.append(
            {
                "prompt": observation_prompt(obs, task, observation, prompt_format=prompt_format, templates=templates),
                "target": sample.target,
                "sample_id": sample.id,
                "task": sample.task,
                "trajectory_id": sample.trajectory_id,
                "step": sample.step,
                "observation_mode": observation,
                "history": obs["history"],
                "cell": obs["cell"],
                "runtime": obs["runtime"],
                "metadata": {
                    "notebook_name": trajectory.notebook_name,
                    "dataset": str(dataset.path),
                    "backend": config.backend,
                    "history_length": config.history_length,
                },
            }
        )
    return rows


def export_dataset(task: TaskName = "next-cell", observation: str = "static", **options: Any) -> Any:
    """The samples of a task as a Hugging Face ``datasets.Dataset``: the rows of `export_samples`, which
    takes the same arguments (``prompt_format``, ``templates``, ``limit``, ``selection_seed``,
    ``sample_ids`` and the env's options).

    Ready for TRL: ``GRPOTrainer(train_dataset=export_dataset(...), reward_funcs=MetricReward(), ...)``.

    Raises:
        ProviderError: ``datasets`` is not installed (``pip install 'themisto-env[rl]'``).
    """
    return import_extra("datasets", "rl").Dataset.from_list(export_samples(task, observation, **options))


def _observations(config: EnvConfig, dataset: Dataset, samples: Sequence[Sample]) -> dict[str, dict[str, Any]]:
    """The env's first observation at each sample: in ``full`` mode with the runtime dumped from its
    served state (one kernel moving through the samples in trajectory and step order)."""
    from themisto_env.env.observation import sample_observation
    from themisto_env.env.state_server import StateServer

    found: dict[str, dict[str, Any]] = {}
    if config.observation != "full":
        for sample in samples:
            trajectory = dataset.trajectories[sample.trajectory_id]
            found[sample.id] = sample_observation(config, trajectory, sample.step, tools_left=config.tool_budget)
        return found
    with StateServer(config, dataset) as server:
        server.warm_up()
        for sample in sorted(samples, key=lambda s: (s.trajectory_id, s.step)):
            trajectory = dataset.trajectories[sample.trajectory_id]
            server.select(trajectory, sample.step)
            server.served_faults()  # a state that could not be served shows no runtime, as in the env
            try:
                runtime = server.runtime_text(config.max_text_chars)
            except InfrastructureError as exc:
                server.recover(exc)
                runtime = ""
            found[sample.id] = sample_observation(
                config, trajectory, sample.step, tools_left=config.tool_budget, runtime=runtime
            )
    return found
