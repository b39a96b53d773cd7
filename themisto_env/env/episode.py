"""An episode's turns without gym: [`Episode`][themisto_env.env.Episode], what
[`ThemistoEnv`][themisto_env.env.ThemistoEnv]'s ``reset`` and ``step`` do (the turn structure is documented in
`themisto_env.env.core`), over the env's parts:

- a `StateServer`, the live state of the current sample;
- a `Scorer`, the rule and the disposable kernels predictions run in;
- an [`EpisodeRecord`][themisto_env.env.EpisodeRecord], the samples left and the current draw's tool calls,
  budget, cost and faults.

Every face steps an [`Episode`][themisto_env.env.Episode]: the gym env adds its spaces, seeding and rendering; the
bridges (TRL, inspect, verifiers, OpenEnv) step one each and are paid exactly what the gym env pays. Episodes over
one `themisto_env.env.group.StateGroup` (a GRPO group's rollouts) share its servers and its answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from themisto_env import tracing
from themisto_env.data.samples import Sample
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.actions import Action, Prediction, parse_action, reset_options
from themisto_env.env.config import EnvConfig, env_config_and_dataset, warn_unisolated
from themisto_env.env.info import StepInfo
from themisto_env.env.kernel_spec import env_kernel_spec
from themisto_env.env.observation import sample_observation
from themisto_env.env.outcomes import ToolOutcome, not_served
from themisto_env.env.record import EpisodeRecord
from themisto_env.env.scorer import Scorer
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import ToolCall, ToolContext, task_tools
from themisto_env.errors import ActionError, BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.scoring.score import SampleScore
from themisto_env.state.check import StateReport

if TYPE_CHECKING:
    from themisto_env.env.group import StateGroup

__all__ = ["Episode", "StepResult"]

#: What a step returns: observation, reward, terminated, truncated, info (gymnasium's order).
StepResult = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


class Episode:
    """The turns of an episode over one trajectory's samples: tool calls, predictions, the next sample.

    Args:
        config: The options.
        dataset: The open dataset (its samples of ``config.task`` under ``config.sample_rule``).
        spec: The kind of kernel (`KernelSpec`) of the episode's parts; by default the server's or the
            scorer's when one is given, else built once here (`themisto_env.env.kernel_spec.env_kernel_spec`:
            the config's and dataset's) and handed to both.
        server: The state server to serve the samples' states on (default: a new one, closed with the
            episode).
        scorer: The scorer of the predictions (default: a new one, closed with the episode).
        group: The states this episode shares with others (`StateGroup`: their kind of kernel, servers, scorer
            and answers; closed with the group): in place of ``spec``, ``server`` and ``scorer``.

    Raises:
        ConfigError: The dataset has no samples of the task.
    """

    def __init__(
        self,
        config: EnvConfig,
        dataset: Dataset,
        *,
        spec: KernelSpec | None = None,
        server: StateServer | None = None,
        scorer: Scorer | None = None,
        group: StateGroup | None = None,
    ) -> None:
        self.config = config
        self.dataset = dataset
        #: The group whose servers and answers this episode shares (None: a server of its own).
        self.group = group
        if group is not None:
            spec, scorer = group.spec, group.scorer()
        if spec is None:
            spec = server.spec if server is not None else scorer.spec if scorer is not None else None
        #: The kind of the episode's kernels, built once for its parts.
        self.spec = spec if spec is not None else env_kernel_spec(config, dataset)
        self.trajectories: dict[str, Trajectory] = dict(dataset.trajectories)
        self.samples = dataset.samples(config.task, config.sample_rule)
        #: Each trajectory's samples in step order (the episodes).
        self.episode_samples: dict[str, list[Sample]] = dataset.episodes(config.task, config.sample_rule)
        self.episode_ids = sorted(self.episode_samples)
        if not self.episode_ids:
            raise ConfigError(f"no {config.task} samples in {dataset.path} under {config.sample_rule}")
        #: The tools an agent is offered (those that run code would reveal the output in the output task).
        self.tool_names = tuple(tool.name for tool in task_tools(config.task))
        self._owns = (server is None and group is None, scorer is None)
        if server is None and group is None:
            server = StateServer(config, dataset, spec=self.spec)
        self._server = server
        self._group_report: StateReport | None = None  # in a group: how the sample's state was last seen
        self.scorer = scorer if scorer is not None else Scorer(config, dataset, spec=self.spec, provider=server)
        if config.execution_score and config.task == "next-cell":
            warn_unisolated(config.backend, "the execution score")
        self.record = EpisodeRecord(config)
        #: The last tool turn's answer as the agent reads it (the observation's ``tool_result``, before fitting).
        self.tool_text = ""
        self._runtime_text = ""  # the observation's runtime (full mode)
        self._rng: np.random.Generator | None = None
        #: Where the episode's time goes: seconds of ``state``, ``tools`` and ``scoring`` (and ``model``, where
        #: the caller times its agent on it under `traced`); its totals only grow.
        self.clock = tracing.Stopwatch()
        #: Where the last scored sample's time went, from its beginning to its last prediction's score:
        #: seconds by kind (``state``, ``tools``, ``model``, ``scoring``; kinds with none left out).
        self.scored_seconds: dict[str, float] = {}
        self._sample_mark: dict[str, float] = {}
        self._span: Any = tracing.NO_SPAN  # the episode's (from reset to its end)

    @classmethod
    def open(cls, **options: Any) -> Episode:
        """An episode over ``options`` ([`EnvConfig`][themisto_env.env.EnvConfig]; ``dataset`` may be an open
        [`Dataset`][themisto_env.replay.Dataset])."""
        config, dataset = env_config_and_dataset(options)
        return cls(config, dataset)

    @property
    def server(self) -> StateServer:
        """The state server of the current sample's state (in a group: the group's, moved to the sample)."""
        if self.group is None:
            assert self._server is not None
            return self._server
        if self.record.sample is None:
            raise ConfigError("call reset() before using the state")
        return self.group.server_for(self.record.sample.id, self)

    # -- the turns ----------------------------------------------------------------------------------------

    def reset(
        self, options: Mapping[str, Any] | None = None, *, rng: np.random.Generator | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``options`` may name ``trajectory`` (id or index) and ``sample`` (an index into
        that trajectory's samples, or a sample id, whose trajectory is then found); otherwise the
        trajectory is drawn with ``rng`` (default: the episode's own, unseeded).

        Traced: a ``themisto.episode`` span from here to the episode's end (the last sample scored, the
        next reset or [`close`][themisto_env.env.Episode.close]), the parent of this ``themisto.reset`` and of every
        step's spans.

        Raises:
            ConfigError: A bad option (nothing changed).
            SplitError: A trajectory or sample of the other side of the dataset's split.
            BackendUnavailableError: The backend is gone.
        """
        tracing.end(self._span)
        self._span = tracing.start("themisto.episode", {"themisto.task": self.config.task})
        try:
            with self.traced(), tracing.span("themisto.reset"):
                obs, info = self._reset(options, rng)
        except BaseException as exc:
            tracing.fail(self._span, exc)
            self._end_span()
            raise
        where = {"themisto.trajectory.id": info["trajectory_id"], "themisto.sample.id": info["sample_id"]}
        tracing.record(self._span, where)
        return obs, info

    def traced(self) -> Any:
        """A context in which spans are the episode's children and timed work counts on `clock` (the
        runner asks its agent under it, timed as ``model``)."""
        return tracing.within(self._span, self.clock)

    def _end_span(self) -> None:
        tracing.end(self._span, {"themisto.samples_left": len(self.record.queue)})
        self._span = tracing.NO_SPAN

    def _reset(
        self, options: Mapping[str, Any] | None, rng: np.random.Generator | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.group is None:
            self.server.raise_lost_backend()
        if isinstance(options, dict):  # a split's side refuses the other side's, by name (SplitError)
            asked_tid, asked_sample = options.get("trajectory"), options.get("sample")
            self.dataset.check_served(
                trajectory_id=asked_tid if isinstance(asked_tid, str) else None,
                sample_id=asked_sample if isinstance(asked_sample, str) else None,
            )
        tid, start = reset_options(options, self.episode_ids, self.episode_samples, self.config.task)
        if tid is None:
            if rng is None:
                rng = self._rng = self._rng or np.random.default_rng()
            tid = self.episode_ids[int(rng.integers(len(self.episode_ids)))]
        samples = self.episode_samples[tid]
        if not 0 <= start < len(samples):
            raise ConfigError(f"trajectory {tid} has {len(samples)} samples; sample {start} is out of range")
        self.record.start(self.trajectories[tid], samples[start:])
        if self.group is None:
            self.server.warm_up()  # a kernel on its way before the first state is needed
        return self._begin_sample(), self.info()

    def step(self, action: Any) -> StepResult:
        """Take one action: a tool call (answered in the observation's ``tool_result``; ``-tool_cost``) or a
        prediction (scored; the sample's reward less what its tool steps paid). See
        `themisto_env.env.core` for the turn structure.

        Raises:
            ConfigError: No episode was started.
            BackendUnavailableError: The backend is gone (not recovered from: the sample it hit is left
                unscored; a step that scored a sample first returns that score and the next call raises).
        """
        with self.traced():
            stepped = self._step(action)
        if stepped[2]:  # terminated: the episode's span ends
            self._end_span()
        return stepped

    def _step(self, action: Any) -> StepResult:
        if self.record.sample is None:
            raise ConfigError("call reset() before step()")
        if self.group is None:
            self.server.raise_lost_backend()
        extra: dict[str, Any] = {}
        try:
            parsed: Action | None = parse_action(action)
        except ActionError as exc:
            parsed, extra["action_error"] = None, str(exc)
        if isinstance(parsed, Prediction):
            return self._submit(parsed, extra)
        current = self.record.current
        tools_off = f"tools are off in the {self.config.observation!r} observation mode"
        if parsed is None:
            turn = current.invalid_turn(extra["action_error"])
        elif self.config.observation != "tools":
            turn = current.invalid_turn(tools_off)
            if not turn.refused:
                extra["action_error"] = tools_off
        else:
            turn = current.tool_turn(parsed, self._run_tool)
        if turn.refused:  # the sample waits for its prediction
            extra["tool_refused"] = True
        elif turn.outcome is not None and turn.outcome.result is None:
            extra["infrastructure_error"] = turn.outcome.error
        elif turn.outcome is not None and turn.outcome.result is not None:
            extra["tool_result"] = turn.outcome.result.as_dict()
        self.tool_text = turn.text
        return self.observation(), turn.reward, False, False, self.info(**extra)

    def _begin_sample(self) -> dict[str, Any]:
        self._sample_mark = self.clock.mark()
        sample = self.record.begin_sample()
        assert self.record.trajectory is not None
        self.tool_text = ""
        self._runtime_text = ""
        self._group_report = None
        if self.group is not None:  # served on the group's server when a tool needs it
            return self.observation()
        self.server.select(self.record.trajectory, sample.step)
        if not self.config.lazy_state or self.config.observation == "full":
            self.record.current.add_faults(self.server.served_faults())
        if self.config.observation == "full":
            try:
                self._runtime_text = self.server.runtime_text(self.config.max_text_chars)
            except InfrastructureError as exc:
                self.record.current.add_faults(self.server.recover(exc))
        return self.observation()

    def _run_tool(self, call: ToolCall) -> ToolOutcome:
        sample = self.record.sample
        assert sample is not None
        if self.group is None:
            return self.server.call_tool(call, self.scorer.try_code(sample))
        outcome, report = self.group.call_tool(self, sample.id, call, self.scorer.try_code(sample))
        if outcome.result is not None and report is not None:
            self._group_report = report
        return outcome

    def _submit(self, prediction: Prediction, extra: dict[str, Any]) -> StepResult:
        """Score the prediction (the step pays the sample's reward less what its tool steps already paid:
        the sample's steps sum to ``SampleScore.reward``, or to 0 when the sample is unscored)."""
        record = self.record
        sample, current = record.sample, record.current
        assert sample is not None
        scored = self.score_prediction(prediction.text)
        self.scored_seconds = self.clock.since(self._sample_mark)  # its K-th draw's: the whole sample's
        value = (scored.reward if scored.reward is not None else 0.0) + current.tool_cost_paid
        extra.update(dict(scored))
        extra["tool_calls"] = list(current.tool_calls)
        extra["scored_sample_id"] = sample.id
        report = self.state_report
        if report is not None and report.faults:
            extra["recovered"] = list(report.faults)
        extra["scored_state"] = report.as_dict() if report is not None else not_served()
        extra["scored_draw"] = record.draw
        if record.finish_draw(scored):  # another prediction for the same sample, same state
            self.tool_text = ""
            return self.observation(), value, False, False, self.info(**extra)
        terminated = not record.queue
        if terminated:
            obs = self.observation()
        else:
            try:
                obs = self._begin_sample()
            except BackendUnavailableError as exc:  # the sample is scored: report it; the next call raises
                self.server.lose_backend(exc)
                obs = self.observation()
        return obs, value, terminated, False, self.info(**extra)

    # -- what the agent and the caller read ----------------------------------------------------------------

    def observation(self) -> dict[str, Any]:
        """The current sample's observation (see `sample_observation`)."""
        record = self.record
        assert record.trajectory is not None and record.sample is not None
        return sample_observation(
            self.config,
            record.trajectory,
            record.sample.step,
            tools_left=record.current.tools_left,
            runtime=self._runtime_text,
            tool_result=self.tool_text,
        )

    def info(self, **extra: Any) -> dict[str, Any]:
        """The step's ``info``: a `StepInfo` as a dict (its keys are documented
        there), with ``extra``'s keys."""
        sample = self.record.sample
        assert sample is not None
        report = self.state_report
        return StepInfo(
            sample_id=sample.id,
            trajectory_id=sample.trajectory_id,
            step=sample.step,
            task=self.config.task,
            observation_mode=self.config.observation,
            tool_names=self.tool_names if self.config.observation == "tools" else (),
            samples_left=self.record.samples_left,
            draw=self.record.draw,
            state=report.as_dict() if report is not None else not_served(),
            **extra,
        ).model_dump()

    @property
    def current_sample(self) -> Sample | None:
        """The sample being predicted (its target is for scoring code, never for agents)."""
        return self.record.sample

    @property
    def state_report(self) -> StateReport | None:
        """How the current sample's state was served and checked (None while it is not served yet)."""
        return self.server.report if self.group is None else self._group_report

    def serve_state(self) -> StateReport:
        """Bring the kernel to the current sample's state now, if it is not there yet, and say how it was
        served and checked (done on its own when a tool or the ``full`` mode needs it)."""
        if self.record.sample is None:
            raise ConfigError("call reset() before serve_state()")
        server = self.server
        self.record.current.add_faults(server.served_faults())
        assert server.report is not None
        self._group_report = server.report if self.group is not None else None
        return server.report

    def tool_context(self) -> ToolContext:
        """The tools' view of the current state (for langchain tools bound to this episode)."""
        sample = self.record.sample
        if self.record.trajectory is None or sample is None:
            raise ConfigError("call reset() before using tools")
        server = self.server
        self.record.current.add_faults(server.served_faults())
        self._group_report = server.report if self.group is not None else None
        return server.tool_context(self.scorer.try_code(sample))

    def score_prediction(self, text: str) -> SampleScore:
        """Score a prediction of the current sample as the next prediction step would, without taking the
        step (the scorer's score with this draw's tool calls, faults and state check)."""
        sample = self.record.sample
        if sample is None:
            raise ConfigError("call reset() before score_prediction()")
        return self.scorer.score(sample, text, **self.record.current.score_args(self.state_report))

    def close(self) -> None:
        """Close the parts this episode made (a server, scorer or group given to it stays open)."""
        self._end_span()
        owns_server, owns_scorer = self._owns
        if owns_server and self._server is not None:
            self._server.close()
        if owns_scorer:
            self.scorer.close()

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
