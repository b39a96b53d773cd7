"""Multi-turn tool-calling GRPO with TRL: ``GRPOTrainer(environment_factory=...)`` over the env's tools.

TRL makes one environment instance per rollout, whose public methods are the model's tools;
[`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv] is that instance for themisto-env (docs/rl.md
shows the trainer). Each rollout is an [`Episode`][themisto_env.env.Episode] reset to its sample; each tool
call is one of its tool steps, and ``get_reward()`` scores the last submitted prediction as the episode's
prediction step would, or returns None when the rollout cannot be trusted. The rollouts of one sample (a
GRPO group) share one kernel in its state through [`SharedStates`][themisto_env.bridges.rl.SharedStates].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from themisto_env.env.config import env_config_and_dataset
from themisto_env.env.episode import Episode
from themisto_env.env.group import StateGroup
from themisto_env.env.outcomes import state_mismatch
from themisto_env.env.record import SampleRecord
from themisto_env.env.tools import SUBMIT, TOOLS, ToolCall, ToolSpec, tool_method
from themisto_env.errors import ConfigError, import_extra
from themisto_env.scoring.score import SampleScore

__all__ = ["ROLLOUT_TOOLS", "SUBMIT_INSTRUCTION", "SharedStates", "ThemistoToolEnv", "tool_dataset", "tool_methods"]

#: The model's tools in a rollout, in the table's order: the env's read-only observation tools, then
#: `SUBMIT`. A tool that runs code (`try_cell`) is left out: TRL reads the tools off the environment's class,
#: which is the same in both tasks, and the output task does not offer it.
ROLLOUT_TOOLS: tuple[ToolSpec, ...] = (*(tool for tool in TOOLS.values() if tool.read_only), SUBMIT)

#: Appended to each rollout's prompt (``reset``'s return value): how the prediction is given.
SUBMIT_INSTRUCTION = "\n\nGive your prediction by calling the submit tool with it; the last submission is scored."


class SharedStates(StateGroup):
    """The live states the rollouts of one process query (a `themisto_env.env.group.StateGroup`
    over the env's options in the ``tools`` mode), and TRL's ``environment_factory`` over them.

    Args:
        share: Rollouts of the same sample share one kernel (False: a kernel per rollout instance).
        max_kernels: With ``share``, how many samples' states are kept live at once (one kernel each).
        cache_answers: With ``share``, a tool call a rollout of the group already made (same tool, same
            arguments) is answered with the answer the shared kernel gave, without asking it again.
        **env_options: [`EnvConfig`][themisto_env.env.EnvConfig] options (``task``, ``dataset``: a folder
            or an open [`Dataset`][themisto_env.replay.Dataset], ``backend``, ``tool_budget``,
            ``tool_cost``, ``reward``, ``execution_score``, ...).
    """

    def __init__(
        self, *, share: bool = True, max_kernels: int = 4, cache_answers: bool = True, **env_options: Any
    ) -> None:
        config, dataset = env_config_and_dataset({**env_options, "observation": "tools"})
        super().__init__(config, dataset, share=share, max_kernels=max_kernels, cache_answers=cache_answers)

    def factory(self) -> Callable[[], ThemistoToolEnv]:
        """The ``environment_factory`` for TRL: each call makes a rollout instance over these states."""
        return lambda: ThemistoToolEnv(self)


class ThemistoToolEnv:
    """One rollout for ``GRPOTrainer(environment_factory=...)``: the observation tools of one sample's
    live state, a ``submit`` tool for the prediction, and its reward.

    Its public methods are TRL's: ``reset``, ``get_reward``, and one method per tool of `ROLLOUT_TOOLS`
    (made from the tool table: see `tool_methods`); TRL offers every other public method to the model, so
    there is none. It closes what it made through ``with`` (or ``states.close()``).

    Args:
        states: The shared states (see [`SharedStates`][themisto_env.bridges.rl.SharedStates]); a new one over
            ``env_options`` if None.
        **env_options: Env options when ``states`` is None.

    Attributes:
        states: The shared states its tools are answered from.
        episode: The rollout's episode over them (reset to its sample).
    """

    def __init__(self, states: SharedStates | None = None, **env_options: Any) -> None:
        self.states = states if states is not None else SharedStates(**env_options)
        self._own_states = states is None
        self.episode = Episode(self.states.config, self.states.dataset, group=self.states)
        self.answer: str | None = None
        self.last_score: SampleScore | None = None  # what get_reward() last computed

    @property
    def record(self) -> SampleRecord:
        """The rollout's record: its tool calls against the budget and the faults that touch it."""
        return self.episode.record.current

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The rollout's tool calls that ran (``{"tool", "args", "ok"}``; the record's)."""
        return self.record.tool_calls

    @property
    def faults(self) -> list[str]:
        """Infrastructure failures during the rollout's tool calls (the record's)."""
        return self.record.faults

    # -- TRL's contract ----------------------------------------------------------------------------------

    def reset(self, **row: Any) -> str:
        """Start a rollout on a dataset row (its ``sample_id``). Nothing is served until a tool needs it.
        Returns the instruction TRL appends to the prompt: predictions are given with ``submit``."""
        sample_id = row.get("sample_id")
        if not isinstance(sample_id, str):
            raise ConfigError(f"row has no known sample_id (got {sample_id!r}); build rows with tool_dataset()")
        self.episode.reset({"sample": sample_id})
        self.answer, self.last_score = None, None
        return SUBMIT_INSTRUCTION

    def get_reward(self) -> float | None:
        """The rollout's reward: [`score_sample`][themisto_env.scoring.score_sample] of the last submitted
        prediction (an empty one when nothing was submitted) with the rollout's tool calls, under the
        env's rule (docs/reward.md; the execution score runs the prediction in a disposable kernel);
        None when an infrastructure failure or a state that differs from the recording touched the
        rollout (TRL leaves it out: never scored as a wrong answer). The whole record is kept in
        `last_score`."""
        if self.episode.current_sample is None:
            raise ConfigError("call reset() before get_reward()")
        self.last_score = self.episode.score_prediction(self._prediction())
        return self.last_score.reward

    @property
    def untrusted(self) -> list[str]:
        """Why this rollout's reward cannot be trusted (infrastructure faults, state mismatches)."""
        mismatch = state_mismatch(self.episode.state_report)
        return [*self.faults, *([f"state mismatch: {mismatch}"] if mismatch else [])]

    # -- internals ------------------------------------------------------------------------------------------

    def _prediction(self) -> str:
        """The submitted prediction as it is scored: read as the LLM agents read a reply (a fenced block)."""
        if not self.answer:
            return ""
        from themisto_env.agents.parsing import extract_prediction

        return extract_prediction(self.answer, self.states.config.task)

    def _call(self, tool: str, args: dict[str, Any]) -> str:
        """What a tool method answers: `submit` keeps the prediction; an observation tool is one tool step of
        the rollout's episode."""
        if tool == SUBMIT.name:
            self.answer = str(SUBMIT.args_model.model_validate(args).prediction)  # type: ignore[attr-defined]
            return "Prediction recorded."
        if self.episode.current_sample is None:
            raise ConfigError("call reset() before using tools")
        self.episode.step(ToolCall(tool=tool, args=args))
        return self.episode.tool_text

    def __enter__(self) -> ThemistoToolEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close what this instance made (its own states, when it was given none)."""
        self.episode.close()
        if self._own_states:
            self.states.close()


for _tool in ROLLOUT_TOOLS:  # the model's tools: methods made from the table (name, signature, docstring)
    setattr(ThemistoToolEnv, _tool.name, tool_method(_tool, ThemistoToolEnv._call))


def tool_methods(rollout: Any) -> list[Callable[..., str]]:
    """A rollout's tool methods, bound, as TRL offers them to the model (in the order it lists them: by
    name), for a chat template's ``tools``. ``rollout`` is any object with a method per `ROLLOUT_TOOLS` tool."""
    return [getattr(rollout, name) for name in sorted(tool.name for tool in ROLLOUT_TOOLS)]


def tool_dataset(task: str = "next-cell", *, limit: int | None = None, **env_options: Any) -> Any:
    """Rows for tool-calling GRPO: a chat prompt (the history and the tool invitation, as the tool-using
    agents are prompted) and the ``sample_id`` that
    [`ThemistoToolEnv.reset`][themisto_env.bridges.rl.ThemistoToolEnv.reset] serves; no target.

    Returns:
        A ``datasets.Dataset``.
    """
    from themisto_env.bridges.rl.export import export_samples, observation_prompt

    datasets = import_extra("datasets", "rl")
    rows = export_samples(task, "static", limit=limit, **env_options)  # type: ignore[arg-type]
    budget = env_config_and_dataset({**env_options, "task": task})[0].tool_budget  # the option or its default
    out = []
    for row in rows:
        observation = {"history": row["history"], "cell": row["cell"], "tools_left": budget}
        out.append(
            {"prompt": observation_prompt(observation, task, "tools"), "sample_id": row["sample_id"]}  # type: ignore[arg-type]
        )
    return datasets.Dataset.from_list(out)
