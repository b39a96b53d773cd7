"""Multi-turn tool-calling GRPO with TRL: ``GRPOTrainer(environment_factory=...)`` over the env's tools.

TRL (>= 1.16, experimental) makes one environment instance per rollout; the instance's public methods
are the model's tools (typed, described by their docstrings), ``reset(**row)`` starts a rollout on a
dataset row, and ``get_reward()`` scores the finished rollout. :class:`ThemistoToolEnv` is that
instance for themisto-env::

    from themisto_env.bridges.rl.tool_env import SharedStates, tool_dataset

    states = SharedStates(task="next-cell")            # the kernels, shared by every rollout
    trainer = GRPOTrainer(
        model=..., args=GRPOConfig(...),
        train_dataset=tool_dataset("next-cell"),        # rows: a prompt and a sample_id
        environment_factory=states.factory(),          # -> ThemistoToolEnv
    )

A rollout: ``reset(sample_id=...)`` serves nothing yet (the state is lazy); the model calls the
observation tools (``list_variables``, ``inspect_variable``, ``dataframe_head``, ...), each answered
from the live kernel in the sample's state, at most ``tool_budget`` times; it gives its prediction with
``submit``; ``get_reward()`` scores the last submitted prediction with
:func:`themisto_env.scoring.score.score_sample` (the env's one rule, README "Reward": metrics, execution
score when on, minus ``tool_cost`` per tool call) and returns None (TRL leaves it out) when the
rollout cannot be trusted: an infrastructure failure during its tool calls, or a state that differs from
the recording.

**Group sharing.** Tools are read-only, so the rollouts of one sample (a GRPO group) can share one kernel
in that state: :class:`SharedStates` keeps one :class:`~themisto_env.env.core.ThemistoEnv` (one kernel) per
sample in flight, up to ``max_kernels`` (the least recently used one moves to a new sample when all are
taken), and a call one rollout of the group made is answered to the others from that kernel's answer
(``cache_answers``; the state is the same and tools are read-only). With ``share=False`` each rollout
instance has an env and a kernel of its own (TRL's default picture), which costs a kernel per rollout.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from themisto_env.data.samples import Sample
from themisto_env.env.info import StepInfo
from themisto_env.env.tools import ToolCall
from themisto_env.errors import ConfigError
from themisto_env.scoring.score import SampleScore, score_sample

__all__ = ["SUBMIT_INSTRUCTION", "SharedStates", "ThemistoToolEnv", "tool_dataset"]

#: Appended to each rollout's prompt (``reset``'s return value): how the prediction is given.
SUBMIT_INSTRUCTION = "\n\nGive your prediction by calling the submit tool with it; the last submission is scored."


class SharedStates:
    """The live states the rollouts of one process query, and the options of the env behind them.

    Args:
        share: Rollouts of the same sample share one kernel (False: a kernel per rollout instance).
        max_kernels: With ``share``, how many samples' states are kept live at once (one kernel each).
        cache_answers: With ``share``, a tool call a rollout of the group already made (same tool, same
            arguments) is answered with the answer the shared kernel gave, without asking it again:
            the kernel is in the same verified state and tools are read-only, so it would answer the
            same. Dropped when the kernel moves to another sample or fails.
        **env_options: :class:`~themisto_env.env.core.EnvConfig` options (``task``, ``dataset``: a folder
            or an open :class:`~themisto_env.replay.dataset.Dataset`, ``backend``, ``tool_budget``,
            ``tool_cost``, ``reward``, ``execution_score``, ...).

    Attributes:
        config: The env config every rollout is served and scored under.
        dataset: The dataset the samples come from (shared by every env made here).
        samples: The task's samples by id.
    """

    def __init__(
        self, *, share: bool = True, max_kernels: int = 4, cache_answers: bool = True, **env_options: Any
    ) -> None:
        from themisto_env.env.core import env_config_and_dataset

        if max_kernels < 1:
            raise ConfigError(f"max_kernels must be at least 1, got {max_kernels}")
        self.share = share
        self.max_kernels = max_kernels
        self.cache_answers = cache_answers and share
        #: Answers given for each live sample: (tool, arguments as JSON) -> (text, info of that call).
        self.answers: dict[str, dict[tuple[str, str], tuple[str, StepInfo]]] = {}
        self.config, self.dataset = env_config_and_dataset({**env_options, "observation": "tools"})
        self.options = {**env_options, "observation": "tools", "dataset": self.dataset}
        listed = self.dataset.samples(self.config.task, self.config.sample_rule)
        self.samples: dict[str, Sample] = {s.id: s for s in listed}
        self._scoring_env: Any | None = None  # the env whose disposable kernels run predictions; on first use
        self._live: OrderedDict[str, Any] = OrderedDict()  # sample id -> ThemistoEnv serving it (shared)
        self._owned: list[Any] = []  # every env made here (closed by close())
        self._lock = threading.RLock()
        self._closed = False

    def factory(self) -> Callable[[], ThemistoToolEnv]:
        """The ``environment_factory`` for TRL: each call makes a rollout instance over these states."""
        return lambda: ThemistoToolEnv(self)

    def scoring_env(self) -> Any:
        """The env whose disposable kernels run submitted predictions for the execution score (made on
        first use, never serves a state; closed by :meth:`close`)."""
        from themisto_env.env.core import ThemistoEnv

        with self._lock:
            if self._closed:
                raise ConfigError("the shared states are closed")
            if self._scoring_env is None:
                self._scoring_env = ThemistoEnv(**{**self.options, "warm_kernels": 0})
            return self._scoring_env

    def new_env(self) -> Any:
        """A new env over the same options (closed by :meth:`close`)."""
        from themisto_env.env.core import ThemistoEnv

        if self._closed:
            raise ConfigError("the shared states are closed")
        env = ThemistoEnv(**{**self.options, "tool_budget": 10**9, "tool_cost": 0.0})
        self._owned.append(env)
        return env

    def env_for(self, sample_id: str, own: Any | None = None) -> Any:
        """The env that answers tools for ``sample_id``, reset at it if it served another sample: the
        group's shared env, or ``own`` (a rollout's own env, without sharing)."""
        tid, index = self.dataset.episode_position(sample_id, self.config.sample_rule)
        if own is not None:
            if own.current_sample is None or own.current_sample.id != sample_id:
                own.reset(options={"trajectory": tid, "sample": index})
            return own
        env = self._live.get(sample_id)
        if env is not None:
            self._live.move_to_end(sample_id)
            return env
        if len(self._live) < self.max_kernels:
            env = self.new_env()
        else:
            moved, env = self._live.popitem(last=False)  # the least recently used state moves on
            self.answers.pop(moved, None)
        env.reset(options={"trajectory": tid, "sample": index})
        self._live[sample_id] = env
        return env

    def lock(self) -> threading.RLock:
        """Held around each tool call (a kernel answers one request at a time)."""
        return self._lock

    def close(self) -> None:
        """Close every env and kernel made here. Idempotent."""
        with self._lock:
            self._closed = True
            envs, self._owned = self._owned, []
            self._live.clear()
            self.answers.clear()
            scoring, self._scoring_env = self._scoring_env, None
        for env in envs:
            env.close()
        if scoring is not None:
            scoring.close()

    def __enter__(self) -> SharedStates:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ThemistoToolEnv:
    """One rollout for ``GRPOTrainer(environment_factory=...)``: the observation tools of one sample's
    live state, a ``submit`` tool for the prediction, and its reward.

    Args:
        states: The shared states (see :class:`SharedStates`); a new one over ``env_options`` if None.
        **env_options: Env options when ``states`` is None.
    """

    def __init__(self, states: SharedStates | None = None, **env_options: Any) -> None:
        self._states = states if states is not None else SharedStates(**env_options)
        self._own_states = states is None
        self._own_env: Any | None = None  # without sharing: this rollout's own env
        self.sample: Sample | None = None
        self.answer: str | None = None
        self.tool_calls: list[dict[str, Any]] = []
        self.faults: list[str] = []  # infrastructure failures during this rollout's tool calls
        self.mismatches: list[str] = []  # how the served state differed from the recording
        self.last_score: SampleScore | None = None  # what get_reward() last computed

    # -- TRL's contract ----------------------------------------------------------------------------------

    def reset(self, **row: Any) -> str:
        """Start a rollout on a dataset row (its ``sample_id``). Nothing is served until a tool needs it.
        Returns the instruction TRL appends to the prompt: predictions are given with ``submit``."""
        sample_id = row.get("sample_id")
        if isinstance(sample_id, str):  # a split's side refuses the other side's samples (SplitError)
            self._states.dataset.check_served(sample_id=sample_id)
        if sample_id not in self._states.samples:
            raise ConfigError(f"row has no known sample_id (got {sample_id!r}); build rows with tool_dataset()")
        self.sample = self._states.samples[sample_id]
        self.answer = None
        self.tool_calls = []
        self.faults, self.mismatches, self.last_score = [], [], None
        return SUBMIT_INSTRUCTION

    def get_reward(self) -> float | None:
        """The rollout's reward: :func:`~themisto_env.scoring.score.score_sample` of the last submitted
        prediction (an empty one when nothing was submitted) with the rollout's tool calls, under the
        env's rule (README, "Reward"; the execution score runs the prediction in a disposable kernel);
        None when an infrastructure failure or a state that differs from the recording touched the
        rollout (TRL leaves it out: never scored as a wrong answer). The whole record is kept in
        :attr:`last_score`."""
        if self.sample is None:
            raise ConfigError("call reset() before get_reward()")
        rule = self._states.config.scoring_rule()
        flagged = bool(self.faults or self.mismatches)
        execution = None
        if rule.execution_score and self.sample.task == "next-cell" and not flagged:
            execution = self._states.scoring_env().execution_run(self.sample)
        self.last_score = score_sample(
            self._prediction(),
            self.sample.target,
            task=self.sample.task,
            rule=rule,
            tools_used=len(self.tool_calls),
            execution=execution,
            faults=self.faults,
            state_mismatch="; ".join(self.mismatches) or None,
        )
        return self.last_score.reward

    @property
    def untrusted(self) -> list[str]:
        """Why this rollout's reward cannot be trusted (infrastructure faults, state mismatches)."""
        return [*self.faults, *(f"state mismatch: {m}" for m in self.mismatches)]

    # -- tools (the model sees their names, arguments and docstrings) ---------------------------------------

    def list_variables(self) -> str:
        """List the user variables in the notebook's kernel: name, type, shape or length, size in memory.

        Returns:
            A table of the variables, or a note that there are none.
        """
        return self._tool("list_variables")

    def inspect_variable(self, name: str) -> str:
        """Inspect one variable in the kernel: type, shape, dtype, length, size and its value (repr).

        Args:
            name: The variable's name.

        Returns:
            What the variable is and holds, cut to a bounded length.
        """
        return self._tool("inspect_variable", name=name)

    def dataframe_head(self, name: str, n: int = 5) -> str:
        """Show the first n rows of a pandas DataFrame or Series in the kernel.

        Args:
            name: The name of a DataFrame or Series.
            n: How many first rows to show (1 to 50).

        Returns:
            The rows as text.
        """
        return self._tool("dataframe_head", name=name, n=n)

    def dataframe_info(self, name: str) -> str:
        """Show df.info() of a pandas DataFrame or Series: index, columns, non-null counts, dtypes.

        Args:
            name: The name of a DataFrame or Series.

        Returns:
            The info text.
        """
        return self._tool("dataframe_info", name=name)

    def memory_usage(self) -> str:
        """Show the kernel's memory and the largest variables with their sizes.

        Returns:
            The kernel total and the largest variables.
        """
        return self._tool("memory_usage")

    def get_source(self, name: str) -> str:
        """Show the source code of a function or class defined in the notebook.

        Args:
            name: The function's or class's name.

        Returns:
            Its source.
        """
        return self._tool("get_source", name=name)

    def submit(self, prediction: str) -> str:
        """Submit your prediction (the next cell's source, or the cell's output). The last one counts.

        Args:
            prediction: The predicted text.

        Returns:
            A confirmation.
        """
        self.answer = str(prediction)
        return "Prediction recorded."

    # -- internals ------------------------------------------------------------------------------------------

    def _prediction(self) -> str:
        """The submitted prediction as it is scored: read as the LLM agents read a reply (a fenced block)."""
        if not self.answer:
            return ""
        from themisto_env.agents.parsing import extract_prediction

        assert self.sample is not None
        return extract_prediction(self.answer, self.sample.task)  # type: ignore[arg-type]

    def _tool(self, tool: str, **args: Any) -> str:
        if self.sample is None:
            raise ConfigError("call reset() before using tools")
        config = self._states.config
        if len(self.tool_calls) >= config.tool_budget:
            return f"The tool budget ({config.tool_budget} calls) is spent: submit your prediction."
        states = self._states
        key = (tool, json.dumps(args, sort_keys=True))
        with states.lock():
            cached = states.answers.get(self.sample.id, {}).get(key) if states.cache_answers else None
            if cached is not None:
                text, info = cached
            else:
                if not states.share and self._own_env is None:
                    self._own_env = states.new_env()
                env = states.env_for(self.sample.id, own=None if states.share else self._own_env)
                obs, _, _, _, raw = env.step(ToolCall(tool=tool, args=args))
                text, info = str(obs["tool_result"]), StepInfo.model_validate(raw)
                if states.cache_answers:
                    if info.infrastructure_error:
                        states.answers.pop(self.sample.id, None)  # the kernel was replaced
                    elif info.state.get("check") != "mismatch":
                        states.answers.setdefault(self.sample.id, {})[key] = (text, info)
        if info.infrastructure_error:
            self.faults.append(info.infrastructure_error)
        elif info.state.get("check") == "mismatch":
            self.mismatches.append("; ".join(map(str, info.state.get("differences", [])[:5])) or "the state differs")
        else:
            self.tool_calls.append({"tool": tool, "args": args, "ok": bool((info.tool_result or {}).get("ok"))})
        return text

    def close(self) -> None:
        """Close what this instance owns (its own states, when it made them). Idempotent."""
        if self._own_states:
            self._states.close()


def tool_dataset(task: str = "next-cell", *, limit: int | None = None, **env_options: Any) -> Any:
    """Rows for tool-calling GRPO: a chat prompt (the history and the tool invitation, as the tool-using
    agents are prompted) and the ``sample_id`` that :meth:`ThemistoToolEnv.reset` serves; no target.

    Returns:
        A ``datasets.Dataset``.
    """
    from themisto_env.bridges.rl._deps import require
    from themisto_env.bridges.rl.export import export_samples, observation_prompt

    datasets = require("datasets")
    rows = export_samples(task, "static", limit=limit, **env_options)  # type: ignore[arg-type]
    budget = int(env_options.get("tool_budget", 5))
    out = []
    for row in rows:
        observation = {"history": row["history"], "cell": row["cell"], "tools_left": budget}
        out.append(
            {"prompt": observation_prompt(observation, task, "tools"), "sample_id": row["sample_id"]}  # type: ignore[arg-type]
        )
    return datasets.Dataset.from_list(out)
