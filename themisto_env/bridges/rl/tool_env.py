"""Multi-turn tool-calling GRPO with TRL: ``GRPOTrainer(environment_factory=...)`` over the env's tools.

TRL (>= 1.16, experimental) makes one environment instance per rollout; the instance's public methods
are the model's tools (typed, described by their docstrings), ``reset(**row)`` starts a rollout on a
dataset row, and ``get_reward()`` scores the finished rollout.
[`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv] is that instance for themisto-env::

    from themisto_env.bridges.rl.tool_env import SharedStates, tool_dataset

    states = SharedStates(task="next-cell")            # the kernels, shared by every rollout
    trainer = GRPOTrainer(
        model=..., args=GRPOConfig(...),
        train_dataset=tool_dataset("next-cell"),        # rows: a prompt and a sample_id
        environment_factory=states.factory(),          # -> ThemistoToolEnv
    )

A rollout: ``reset(sample_id=...)`` serves nothing yet (the state is lazy); the model calls the
observation tools (`ROLLOUT_TOOLS`: the env's read-only tools, methods made from the tool table
`themisto_env.env.tools.TOOLS`, so their names, arguments and docstrings are the table's), each answered
from the live kernel in the sample's state; it gives its prediction with the table's `SUBMIT` tool; ``get_reward()``
scores the last submitted prediction with the env's [`Scorer`][themisto_env.env.Scorer] (the one rule,
docs/reward.md: metrics, execution score when on, minus ``tool_cost`` per tool call) and returns None (TRL
leaves it out) when the rollout cannot be trusted: an infrastructure failure during its tool calls, or a
state that differs from the recording.

Each rollout keeps the env's record of a sample ([`SampleRecord`][themisto_env.env.record.SampleRecord]) and takes
each tool call as the gym env does, through the record's `tool_turn`: refused past ``tool_budget`` with the
env's refusal (nothing runs, it costs nothing), else counted, run, recorded, and answered `SANDBOX_FAILED`
where the sandbox failed it (given back, up to the env's cap).

**Group sharing.** Tools are read-only, so the rollouts of one sample (a GRPO group) can share one kernel
in that state: [`SharedStates`][themisto_env.bridges.rl.SharedStates] keeps one
[`StateServer`][themisto_env.env.StateServer] (one kernel) per sample in flight, up to ``max_kernels`` (the least
recently used one moves to a new sample when all are taken), and a call one rollout of the group made is answered to the
others from that kernel's answer (``cache_answers``; the state is the same and tools are read-only). With
``share=False`` each rollout instance has a server and a kernel of its own (TRL's default picture), which costs a kernel
per rollout.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from themisto_env.data.samples import Sample
from themisto_env.env.tools import SUBMIT, TOOLS, ToolCall, ToolResult, ToolSpec, tool_method
from themisto_env.errors import ConfigError, InfrastructureError
from themisto_env.scoring.score import SampleScore

if TYPE_CHECKING:
    from themisto_env.env.outcomes import ToolOutcome
    from themisto_env.env.record import SampleRecord
    from themisto_env.env.scorer import Scorer
    from themisto_env.env.state_server import StateServer

__all__ = ["ROLLOUT_TOOLS", "SUBMIT_INSTRUCTION", "SharedStates", "ThemistoToolEnv", "tool_dataset", "tool_methods"]

#: The model's tools in a rollout, in the table's order: the env's read-only observation tools, then
#: `SUBMIT`. A tool that runs code (`try_cell`) is left out: TRL reads the tools off the environment's class,
#: which is the same in both tasks, and the output task does not offer it.
ROLLOUT_TOOLS: tuple[ToolSpec, ...] = (*(tool for tool in TOOLS.values() if tool.read_only), SUBMIT)

#: Appended to each rollout's prompt (``reset``'s return value): how the prediction is given.
SUBMIT_INSTRUCTION = "\n\nGive your prediction by calling the submit tool with it; the last submission is scored."


class SharedStates:
    """The live states the rollouts of one process query, their scorer, and the options behind them.

    Args:
        share: Rollouts of the same sample share one kernel (False: a kernel per rollout instance).
        max_kernels: With ``share``, how many samples' states are kept live at once (one kernel each).
        cache_answers: With ``share``, a tool call a rollout of the group already made (same tool, same
            arguments) is answered with the answer the shared kernel gave, without asking it again:
            the kernel is in the same verified state and tools are read-only, so it would answer the
            same. Dropped when the kernel moves to another sample or fails.
        **env_options: [`EnvConfig`][themisto_env.env.EnvConfig] options (``task``, ``dataset``: a folder
            or an open [`Dataset`][themisto_env.replay.Dataset], ``backend``, ``tool_budget``,
            ``tool_cost``, ``reward``, ``execution_score``, ...).

    Attributes:
        config: The env config every rollout is served and scored under.
        dataset: The dataset the samples come from (shared by every part made here).
        samples: The task's samples by id.
    """

    def __init__(
        self, *, share: bool = True, max_kernels: int = 4, cache_answers: bool = True, **env_options: Any
    ) -> None:
        from themisto_env.env.config import env_config_and_dataset
        from themisto_env.env.kernel_spec import env_kernel_spec

        if max_kernels < 1:
            raise ConfigError(f"max_kernels must be at least 1, got {max_kernels}")
        self.share = share
        self.max_kernels = max_kernels
        self.cache_answers = cache_answers and share
        #: Answers given for each live sample: (tool, arguments as JSON) -> the shared kernel's result.
        self.answers: dict[str, dict[tuple[str, str], ToolResult]] = {}
        self.config, self.dataset = env_config_and_dataset({**env_options, "observation": "tools"})
        #: The kind of kernel of every server and the scorer made here (built once).
        self.spec = env_kernel_spec(self.config, self.dataset)
        self.environment = self.spec.environment
        listed = self.dataset.samples(self.config.task, self.config.sample_rule)
        self.samples: dict[str, Sample] = {s.id: s for s in listed}
        self._scorer: Scorer | None = None  # runs submitted predictions (execution score); on first use
        self._live: OrderedDict[str, StateServer] = OrderedDict()  # sample id -> the server of its state (shared)
        self._owned: list[StateServer] = []  # every server made here (closed by close())
        self._lock = threading.RLock()
        self._closed = False

    def factory(self) -> Callable[[], ThemistoToolEnv]:
        """The ``environment_factory`` for TRL: each call makes a rollout instance over these states."""
        return lambda: ThemistoToolEnv(self)

    def scorer(self) -> Scorer:
        """The scorer of submitted predictions (its disposable kernels run them for the execution score;
        made on first use, closed by [`close`][themisto_env.bridges.rl.SharedStates.close])."""
        from themisto_env.env.scorer import Scorer

        with self._lock:
            if self._closed:
                raise ConfigError("the shared states are closed")
            if self._scorer is None:
                self._scorer = Scorer(self.config, self.dataset, spec=self.spec)
            return self._scorer

    def new_server(self) -> StateServer:
        """A new state server over the same options (closed by
        [`close`][themisto_env.bridges.rl.SharedStates.close])."""
        from themisto_env.env.state_server import StateServer

        if self._closed:
            raise ConfigError("the shared states are closed")
        server = StateServer(self.config, self.dataset, spec=self.spec)
        self._owned.append(server)
        return server

    def server_for(self, sample_id: str, own: StateServer | None = None) -> StateServer:
        """The state server that answers tools for ``sample_id``, moved to it if it served another sample:
        the group's shared server, or ``own`` (a rollout's own server, without sharing)."""
        sample = self.samples[sample_id]
        if own is not None:
            _move(own, self.dataset.trajectories[sample.trajectory_id], sample.step)
            return own
        server = self._live.get(sample_id)
        if server is not None:
            self._live.move_to_end(sample_id)
            return server
        if len(self._live) < self.max_kernels:
            server = self.new_server()
        else:
            moved, server = self._live.popitem(last=False)  # the least recently used state moves on
            self.answers.pop(moved, None)
        _move(server, self.dataset.trajectories[sample.trajectory_id], sample.step)
        self._live[sample_id] = server
        return server

    def lock(self) -> threading.RLock:
        """Held around each tool call (a kernel answers one request at a time)."""
        return self._lock

    def close(self) -> None:
        """Close every server, kernel and scorer made here. Idempotent."""
        with self._lock:
            self._closed = True
            servers, self._owned = self._owned, []
            self._live.clear()
            self.answers.clear()
            scorer, self._scorer = self._scorer, None
        for server in servers:
            server.close()
        if scorer is not None:
            scorer.close()

    def __enter__(self) -> SharedStates:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _move(server: StateServer, trajectory: Any, step: int) -> None:
    """Select the state before ``step`` of ``trajectory`` on ``server`` unless it is selected already (served
    when a tool needs it), with a warm kernel on its way."""
    if server.trajectory is None or server.trajectory.id != trajectory.id or server.step != step:
        server.select(trajectory, step)
        server.warm_up()


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
    """

    def __init__(self, states: SharedStates | None = None, **env_options: Any) -> None:
        from themisto_env.env.record import SampleRecord

        self.states = states if states is not None else SharedStates(**env_options)
        self._own_states = states is None
        self._own_server: StateServer | None = None  # without sharing: this rollout's own server
        self.sample: Sample | None = None
        self.answer: str | None = None
        #: The rollout's record: its tool calls against the budget and the faults that touch it.
        self.record: SampleRecord = SampleRecord.of(self.states.config)
        self.mismatches: list[str] = []  # how the served state differed from the recording
        self.last_score: SampleScore | None = None  # what get_reward() last computed

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
        if isinstance(sample_id, str):  # a split's side refuses the other side's samples (SplitError)
            self.states.dataset.check_served(sample_id=sample_id)
        if sample_id not in self.states.samples:
            raise ConfigError(f"row has no known sample_id (got {sample_id!r}); build rows with tool_dataset()")
        self.sample = self.states.samples[sample_id]
        self.answer = None
        self.record = self.record.of(self.states.config)  # a new record under the same budget and cost
        self.mismatches, self.last_score = [], None
        return SUBMIT_INSTRUCTION

    def get_reward(self) -> float | None:
        """The rollout's reward: [`score_sample`][themisto_env.scoring.score_sample] of the last submitted
        prediction (an empty one when nothing was submitted) with the rollout's tool calls, under the
        env's rule (docs/reward.md; the execution score runs the prediction in a disposable kernel);
        None when an infrastructure failure or a state that differs from the recording touched the
        rollout (TRL leaves it out: never scored as a wrong answer). The whole record is kept in
        `last_score`."""
        if self.sample is None:
            raise ConfigError("call reset() before get_reward()")
        self.last_score = self.states.scorer().score(
            self.sample,
            self._prediction(),
            tools_used=self.record.tools_used,
            faults=self.record.faults,
            state_mismatch="; ".join(self.mismatches) or None,
        )
        return self.last_score.reward

    @property
    def untrusted(self) -> list[str]:
        """Why this rollout's reward cannot be trusted (infrastructure faults, state mismatches)."""
        return [*self.faults, *(f"state mismatch: {m}" for m in self.mismatches)]

    # -- internals ------------------------------------------------------------------------------------------

    def _prediction(self) -> str:
        """The submitted prediction as it is scored: read as the LLM agents read a reply (a fenced block)."""
        if not self.answer:
            return ""
        from themisto_env.agents.parsing import extract_prediction

        assert self.sample is not None
        return extract_prediction(self.answer, self.sample.task)  # type: ignore[arg-type]

    def _call(self, tool: str, args: dict[str, Any]) -> str:
        """What a tool method answers: `submit` keeps the prediction; an observation tool is one turn of the
        env's record (`SampleRecord.tool_turn`), run by `_run`."""
        if tool == SUBMIT.name:
            self.answer = str(SUBMIT.args_model.model_validate(args).prediction)  # type: ignore[attr-defined]
            return "Prediction recorded."
        if self.sample is None:
            raise ConfigError("call reset() before using tools")
        return self.record.tool_turn(ToolCall(tool=tool, args=args), self._run).text

    def _run(self, call: ToolCall) -> ToolOutcome:
        """Answer a call from the group's cache or the sample's state server (the outcome the record takes)."""
        from themisto_env.env.outcomes import ToolOutcome, state_mismatch
        from themisto_env.state.check import fault_text

        states, sample = self.states, self.sample
        assert sample is not None
        shared = states.cache_answers and TOOLS[call.tool].read_only
        key = (call.tool, json.dumps(call.args, sort_keys=True))
        mismatch = None
        with states.lock():
            cached = states.answers.get(sample.id, {}).get(key) if shared else None
            if cached is not None:
                return ToolOutcome(cached)
            try:
                if not states.share and self._own_server is None:
                    self._own_server = states.new_server()
                server = states.server_for(sample.id, own=None if states.share else self._own_server)
                outcome = server.call_tool(call)
                mismatch = state_mismatch(server.report)
            except InfrastructureError as exc:  # a lost backend, a state that cannot be selected: the
                # machinery's fault, never the tool's answer (TRL would show the model the error's text)
                outcome = ToolOutcome(None, (fault_text(exc),))
            if states.cache_answers:
                if outcome.faults:
                    states.answers.pop(sample.id, None)  # the kernel was replaced
                elif shared and outcome.result is not None and mismatch is None:
                    states.answers.setdefault(sample.id, {})[key] = outcome.result
        if mismatch is not None and outcome.result is not None:
            self.mismatches.append(mismatch)
        return outcome

    def __enter__(self) -> ThemistoToolEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close what this instance made (its own states, when it was given none)."""
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
    from themisto_env.bridges.rl._deps import require
    from themisto_env.bridges.rl.export import export_samples, observation_prompt
    from themisto_env.env.config import env_config_and_dataset

    datasets = require("datasets")
    rows = export_samples(task, "static", limit=limit, **env_options)  # type: ignore[arg-type]
    budget = env_config_and_dataset({**env_options, "task": task})[0].tool_budget  # the option or its default
    out = []
    for row in rows:
        observation = {"history": row["history"], "cell": row["cell"], "tools_left": budget}
        out.append(
            {"prompt": observation_prompt(observation, task, "tools"), "sample_id": row["sample_id"]}  # type: ignore[arg-type]
        )
    return datasets.Dataset.from_list(out)
