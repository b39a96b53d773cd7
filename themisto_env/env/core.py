"""The gymnasium environment: one trajectory per episode, a live kernel, tools, predictions, rewards.

Turn structure of an episode (documented for training loops):

1. ``reset`` picks a trajectory (by ``seed``, or ``options={"trajectory": id, "sample": n}``) and
   brings a kernel to the state just before the first sample's target step by *restoring a snapshot*
   (replaying only the cells a snapshot cannot stand for).
2. For each sample, the agent takes any number of tool calls (``kind=0``; in ``tools`` mode; each costs
   ``tool_cost`` and at most ``tool_budget`` per sample), then one prediction (``kind=1``), which is
   scored by :func:`~themisto_env.scoring.score.score_sample` (the rule: README, "Reward"); the
   prediction step pays the sample's reward less what its tool steps paid, so a sample's steps sum to
   ``info["reward"]`` (to 0 when the sample is unscored). Once the budget is spent, a further tool call
   is refused: nothing runs, it costs nothing, ``tool_result`` says so, ``info["tool_refused"]`` is True,
   and the sample stays open for its prediction (the runner submits an empty one for an agent after
   three refusals in a row).
3. The env then executes the ground-truth cells up to the next sample, and the next observation is that
   sample's. ``terminated`` is True after the trajectory's last sample.

The state is served lazily: the env brings its kernel to a sample's state only when something needs
the live state (a tool call, the ``full`` observation, :meth:`ThemistoEnv.tool_context`,
:meth:`ThemistoEnv.serve_state`). Observations come from the recording, so a reset, a prediction and
the move to the next sample cost no kernel work until a state is needed; the kernel then moves straight
to the sample it is asked for (forward over the recorded cells, or by snapshot). ``lazy_state=False``
serves every sample as it begins. The execution score and ``try_cell`` never use the env's kernel.

Every served state is checked (:mod:`themisto_env.replay.state`): the live namespace must match the
fingerprint recorded at build time, else it is repaired from snapshots, and what could not be repaired
is reported. ``info["state"]`` tells how the current sample's state was reached and checked; while it is
not served yet, ``info["state"]["check"]`` is ``"not served"`` (nothing live was shown to the agent, so
nothing is checked). A sample scored without its state ever being served says so in ``scored_state``
(``"not served"``): its prediction cannot have depended on the live state.

Kernels come from a pool (``warm_kernels``): started in the background from the first ``reset`` with the
modules the dataset's cells import already loaded, handed out once (for the first state, and instead of
a restart where a state starts from a fresh kernel). Open envs of the same kind (backend, limits,
snapshot store, dataset imports) in one process share the pool, so a new env's first state finds a
kernel already warm; the pool and its kernels are closed with the last of those envs.

Model-written code never runs in the env's kernel: the execution score runs each prediction in a
disposable kernel brought to the sample's state and discarded after (:mod:`themisto_env.replay.disposable`),
so nothing one prediction does reaches a later sample or another prediction; the ``try_cell`` tool
(next-cell task) runs the agent's candidates the same way. With ``samples=K`` each
sample takes K predictions (pass@k), each scored on its own; the episode moves on after the K-th.

A lost backend (the Docker engine stopped answering) is not recovered from: the next ``step`` or
``reset`` that needs the backend (a state to serve, a disposable kernel) raises
:class:`~themisto_env.errors.BackendUnavailableError` with one line (a step that scored a sample first
returns that score; the next call raises), the sample it hit is left unscored, and a run resumes from it
once the engine is back. Steps that need no live state (predictions scored from the recording) go on.
A prediction whose own code kills its kernel, hits a limit, runs past the time limit or fools the
measurement under the execution score is the model's failure: it scores 0 with
``info["prediction_failed"]`` (a reason).

What happened to a sample is reported with that sample, never with its neighbour (``info`` is a
:class:`~themisto_env.env.info.StepInfo`; its docstring lists the keys). The ``info`` of the
step that scores sample S (``info["scored_sample_id"] == S``) carries S's ``SampleScore``, how S was served
(``scored_state``) and, when S cannot be trusted, ``infrastructure_error`` (the machinery failed while
serving S or during its tool calls: recovered from, never scored as a wrong answer) or
``state_mismatch`` (S was served in a state that differs from the recording). A failure while moving
on to sample S+1 belongs to S+1.

Nothing the agent reaches reveals the target: the kernel is in the state *before* the target step, the
history holds only executed steps, ``info`` carries ids and scores but no target text.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym

from themisto_env.data.samples import Sample
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.actions import Action, Prediction, parse_action, reset_options
from themisto_env.env.config import (
    MODEL_CODE_TIMEOUT_S,
    EnvConfig,
    ObservationMode,
    env_config_and_dataset,
    warn_unisolated,
)
from themisto_env.env.info import StepInfo
from themisto_env.env.observation import history_items, render_history, render_runtime
from themisto_env.env.prediction import PredictionStep
from themisto_env.env.serving import not_served
from themisto_env.env.spaces import CHARSET, action_space, fit_text, observation_space, text_space
from themisto_env.env.tools import TOOL_NAMES, ToolCall, run_tool
from themisto_env.errors import ActionError, BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.replay.kernel_environments import dataset_kernel_environment

__all__ = [
    "CHARSET",
    "MODEL_CODE_TIMEOUT_S",
    "EnvConfig",
    "ObservationMode",
    "ThemistoEnv",
    "env_config_and_dataset",
    "fit_text",
    "not_served",
    "text_space",
]


MAX_TOOL_REFUNDS = 3
"""How many tool calls per sample are given back when the sandbox, not the agent, failed them (a
disposable kernel that could not reach the state, ...): past it they count, so that no agent earns
endless free calls from code that keeps breaking its kernel's start."""


class ThemistoEnv(PredictionStep, gym.Env[dict[str, Any], dict[str, Any]]):
    """Predict the next cell (or a cell's output) of a Jupyter development trajectory.

    See the module docstring for the turn structure; :class:`EnvConfig` for the options. Its parts by job:
    the episode and its samples' observations, info and tool calls (here), serving the live state
    (:class:`~themisto_env.env.serving.StateServing`) and the prediction step
    (:class:`~themisto_env.env.prediction.PredictionStep`).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, **options: Any) -> None:
        """Make an env over ``options`` (:class:`EnvConfig`; ``dataset`` may be an open
        :class:`~themisto_env.replay.dataset.Dataset`, shared with its other users)."""
        self.config, self.dataset = env_config_and_dataset(options)
        self.render_mode = render_mode
        folder = self.dataset.path
        self.dataset_dir: Path = folder
        #: The kernel environment's id (None: the tool's own Python).
        self.environment = dataset_kernel_environment(folder, self.config.environment, backend=self.config.backend)
        self.trajectories: dict[str, Trajectory] = dict(self.dataset.trajectories)
        self.samples = self.dataset.samples(self.config.task, self.config.sample_rule)
        #: Each trajectory's samples in step order (the episodes).
        self.episode_samples: dict[str, list[Sample]] = self.dataset.episodes(self.config.task, self.config.sample_rule)
        self.episode_ids = sorted(self.episode_samples)
        if not self.episode_ids:
            raise ConfigError(f"no {self.config.task} samples in {folder} under {self.config.sample_rule}")
        self.observation_space = observation_space(self.config.max_text_chars, self.config.tool_budget)
        self.action_space = action_space(self.config.max_text_chars)
        self._init_serving()  # the env's kernel, its warm pool, the disposable kernels: none started yet
        #: The tools an agent is offered (try_cell would reveal the output in the output task).
        self._tool_names = tuple(n for n in TOOL_NAMES if n != "try_cell" or self.config.task == "next-cell")
        if self.config.execution_score and self.config.task == "next-cell":
            warn_unisolated(self.config.backend, "the execution score")
        self._draw = 0  # predictions already scored for the current sample
        self._trajectory: Trajectory | None = None
        self._queue: list[Sample] = []
        self._sample: Sample | None = None
        self._tools_used = 0
        self._tool_cost_paid = 0.0  # what the current prediction's tool steps paid (refunded if unscored)
        self._tool_calls: list[dict[str, Any]] = []
        self._last_tool: str = ""
        self._runtime_text = ""

    # -- gymnasium API -------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``options`` may name ``trajectory`` (id or index) and ``sample`` (an index
        into that trajectory's samples, or a sample id such as ``results.jsonl``'s ``sample_id``, whose
        trajectory is then found); otherwise the trajectory is drawn with the seeded RNG."""
        super().reset(seed=seed)
        self._raise_lost_backend()
        # ConfigError: a bad option (an unknown sample id: the nearest ones), before any change
        if isinstance(options, dict):  # a split's side refuses the other side's, by name (SplitError)
            asked_tid, asked_sample = options.get("trajectory"), options.get("sample")
            self.dataset.check_served(
                trajectory_id=asked_tid if isinstance(asked_tid, str) else None,
                sample_id=asked_sample if isinstance(asked_sample, str) else None,
            )
        tid, start = reset_options(options, self.episode_ids, self.episode_samples, self.config.task)
        if tid is None:
            tid = self.episode_ids[int(self.np_random.integers(len(self.episode_ids)))]
        samples = self.episode_samples[tid]
        if not 0 <= start < len(samples):
            raise ConfigError(f"trajectory {tid} has {len(samples)} samples; sample {start} is out of range")
        self._trajectory = self.trajectories[tid]
        self._queue = list(samples[start:])
        self._draw = 0
        self._warm_up()  # a kernel on its way before the first state is needed
        return self._begin_sample(), self._info()

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._sample is None:
            raise ConfigError("call reset() before step()")
        self._raise_lost_backend()
        extra: dict[str, Any] = {}
        try:
            parsed: Action = parse_action(action)
        except ActionError as exc:
            parsed, extra["action_error"] = None, str(exc)  # type: ignore[assignment]
        if not isinstance(parsed, Prediction):
            if self._tools_used >= self.config.tool_budget:  # refused: the sample waits for its prediction
                extra["tool_refused"] = True
                self._last_tool = (
                    f"Tool budget spent ({self.config.tool_budget} calls for this sample): nothing was run. "
                    "Submit the prediction now (kind=1, Prediction(text=...))."
                )
                return self._observation(), 0.0, False, False, self._info(**extra)
            else:
                self._tools_used += 1
                if parsed is None:
                    self._last_tool = f"Invalid action: {extra['action_error']}"
                else:
                    self._last_tool = self._call_tool(parsed, extra)
                self._tool_cost_paid += self.config.tool_cost
                return self._observation(), -self.config.tool_cost, False, False, self._info(**extra)
        return self._submit(parsed, extra)

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._sample is None:
            return None
        obs = self._observation()
        return f"{obs['history']}\n# Next cell:\n{obs['cell']}\n{obs['tool_result']}"

    def close(self) -> None:
        self._close_serving()

    @property
    def current_sample(self) -> Sample | None:
        """The sample being predicted (its target is for scoring code, never for agents)."""
        return self._sample

    # -- the env's own parts: the sample's observation, info and tool calls ----------------------------

    def _begin_sample(self) -> dict[str, Any]:
        self._sample = self._queue[0]
        self._tools_used = 0
        self._tool_cost_paid = 0.0
        self._tool_calls = []
        self._last_tool = ""
        self._runtime_text = ""
        self._sample_errors = []
        self._report = None  # not served yet
        if not self.config.lazy_state or self.config.observation == "full":
            self._serve()
        if self.config.observation == "full":
            sizes, memory = self._recorded_figures()
            try:
                self._runtime_text = render_runtime(
                    self._state.kernel,
                    max_chars=self.config.max_text_chars,
                    recorded_sizes=sizes,
                    recorded_memory=memory,
                )
            except InfrastructureError as exc:
                self._sample_errors.append(self._recover(exc))
        return self._observation()

    def _observation(self) -> dict[str, Any]:
        assert self._trajectory is not None and self._sample is not None
        limit = self.config.max_text_chars
        recent = self._executed_steps()[-self.config.history_length :] if self.config.history_length else []
        history = render_history(
            history_items(recent),
            length=self.config.history_length,
            max_output_chars=self.config.max_output_chars,
            max_chars=limit,
        )
        cell = self._trajectory.steps[self._sample.step].source if self.config.task == "output" else ""
        return {
            "history": fit_text(history, limit),
            "cell": fit_text(cell, limit),
            "runtime": fit_text(self._runtime_text, limit),
            "tool_result": fit_text(self._last_tool, limit),
            "tools_left": self.config.tool_budget - self._tools_used,
        }

    def _info(self, **extra: Any) -> dict[str, Any]:
        """The step's ``info``: a :class:`~themisto_env.env.info.StepInfo` (its keys are documented there)."""
        assert self._sample is not None
        state = self._report.as_dict() if self._report is not None else not_served()
        return StepInfo(
            sample_id=self._sample.id,
            trajectory_id=self._sample.trajectory_id,
            step=self._sample.step,
            task=self.config.task,
            observation_mode=self.config.observation,
            tool_names=self._tool_names if self.config.observation == "tools" else (),
            samples_left=len(self._queue),
            draw=self._draw,
            state=state,
            **extra,
        ).model_dump()

    def _call_tool(self, call: ToolCall, extra: dict[str, Any]) -> str:
        if self.config.observation != "tools":
            extra["action_error"] = f"tools are off in the {self.config.observation!r} observation mode"
            return f"Invalid action: {extra['action_error']}"
        try:
            result = run_tool(call, self.tool_context())
        except InfrastructureError as exc:
            if call.tool == "try_cell" and not isinstance(exc, BackendUnavailableError):
                extra["infrastructure_error"] = f"{type(exc).__name__}: {exc}"  # its disposable kernel: not ours
            else:
                extra["infrastructure_error"] = self._recover(exc)
            self._sample_errors.append(extra["infrastructure_error"])
            if len(self._sample_errors) <= MAX_TOOL_REFUNDS:  # not the agent's fault, up to a cap per sample
                self._tools_used -= 1
            return "The tool could not run because the sandbox failed; it was recovered: try again."
        self._tool_calls.append({"tool": call.tool, "args": call.args, "ok": result.ok})
        extra["tool_result"] = asdict(result)
        return result.text
