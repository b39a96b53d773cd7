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
   submits an empty prediction.
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

import copy
import functools
import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Literal

import gymnasium as gym
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.data.samples import Sample, SampleRule, TaskName
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.actions import Action, Prediction, parse_action, reset_options
from themisto_env.env.info import StepInfo
from themisto_env.env.observation import history_items, render_history, render_runtime
from themisto_env.env.tools import TOOL_NAMES, ToolCall, ToolContext, run_tool
from themisto_env.errors import ActionError, BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.metrics import RewardWeights
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.disposable import CodeRun, DisposableKernels, imported_modules
from themisto_env.replay.kernel_environments import dataset_kernel_environment
from themisto_env.replay.state import StateReport, TrajectoryKernel, expected_fingerprint, fresh_before
from themisto_env.sandbox.kernel import Kernel
from themisto_env.sandbox.kernel_helper import FINGERPRINT_VERSION
from themisto_env.sandbox.launcher import launcher_class
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.pool import KernelPool, shared_pool
from themisto_env.scoring.score import ExecutionRun, SampleScore, ScoringRule, execution_run, score_sample

log = logging.getLogger("themisto_env")
_WARNED_UNISOLATED: set[str] = set()


def _warn_unisolated(backend: str, what: str) -> None:
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


#: The longest model-written code may run (a prediction under the execution score, a tried cell).
MODEL_CODE_TIMEOUT_S = 30.0

ObservationMode = Literal["static", "full", "tools"]

#: Every character of the Basic Multilingual Plane but surrogates: code and outputs are any text.
CHARSET = "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)
_CHARSET_SET = frozenset(CHARSET)


@functools.cache
def _text_space_prototype(max_length: int) -> spaces.Text:
    return spaces.Text(max_length, min_length=0, charset=CHARSET)


def text_space(max_length: int) -> spaces.Text:
    """A ``Text`` space over :data:`CHARSET`: a copy of one built once per length (building the charset's
    index takes 0.15 s a space, which made every new env cost a second)."""
    return copy.copy(_text_space_prototype(max_length))


class EnvConfig(BaseModel):
    """Options of a Themisto environment (``gymnasium.make(id, **options)``).

    Attributes:
        task: ``next-cell`` or ``output``.
        dataset: A built trajectory dataset folder; None uses the bundled data (built on first use). The
            env itself also takes an open :class:`~themisto_env.replay.dataset.Dataset` here (shared with
            other envs and callers; the config then holds its folder).
        backend: Sandbox backend (``local``, ``bwrap``, ``docker``).
        observation: ``static`` (history), ``full`` (history + every variable and memory), ``tools``
            (history; the agent queries the state with tool calls).
        history_length: How many recent executions the observation shows.
        tool_budget: Tool calls allowed per sample.
        tool_cost: Reward subtracted per tool call.
        reward: Weights of the metrics in the reward.
        execution_score: Also score a next-cell prediction by running it, in a disposable kernel (use
            the docker backend).
        samples: Predictions per sample (pass@k): the sample is scored once per prediction and the
            episode moves on after the last. ``info["draw"]`` is the prediction the env now waits for
            (from 0); the step that scores one says which in ``info["scored_draw"]``.
        lazy_state: Serve a sample's state only when the live state is needed (see the module
            docstring); False serves each sample as it begins.
        warm_kernels: Started kernels kept ready for the env (the dataset's imports preloaded); 0 starts
            each kernel when needed and restarts it in place.
        sample_rule: Which steps are samples.
        limits: Sandbox limits.
        environment: The kernel environment (``themisto kernel-env``) kernels run in: None uses the one the
            dataset was built in (its manifest says), ``default`` the tool's own Python, else a name or id.
            Snapshots written in another environment are not restored (the state is replayed).
        max_output_chars: Cap of one output in the history.
        max_text_chars: Cap of each text field of the observation.
    """

    model_config = ConfigDict(extra="forbid")

    task: TaskName = "next-cell"
    dataset: str | None = None
    backend: str = "local"
    observation: ObservationMode = "tools"
    history_length: int = Field(10, ge=0)
    tool_budget: int = Field(5, ge=0)
    tool_cost: float = Field(0.01, ge=0)
    reward: RewardWeights = Field(default_factory=RewardWeights)
    execution_score: bool = False
    samples: int = Field(1, ge=1)
    lazy_state: bool = True
    warm_kernels: int = Field(1, ge=0)
    sample_rule: SampleRule = Field(default_factory=SampleRule)
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    max_output_chars: int = Field(1500, ge=100)
    max_text_chars: int = Field(16000, ge=1000)
    snapshot_dir: str | None = None
    environment: str | None = None

    def scoring_rule(self) -> ScoringRule:
        """The options that enter the reward: weights, tool cost, execution score (README, "Reward")."""
        return ScoringRule(weights=self.reward, tool_cost=self.tool_cost, execution_score=self.execution_score)


def env_config_and_dataset(options: Mapping[str, Any]) -> tuple[EnvConfig, Dataset]:
    """The env config of ``options`` and its dataset, opened (:meth:`Dataset.open`, cached per process); an
    open :class:`~themisto_env.replay.dataset.Dataset` given as ``dataset`` is used as it is.

    Raises:
        ConfigError: An option is invalid.
        DataError: The dataset folder is missing or not a dataset this package reads.
    """
    given = options.get("dataset")
    opened = given if isinstance(given, Dataset) else None
    if opened is not None:
        options = {**options, "dataset": str(opened.path)}
    try:
        config = EnvConfig(**options)
    except ValidationError as exc:  # one line naming the option (pydantic's own message spans lines)
        first = exc.errors()[0]
        where = ".".join(str(part)[:64] for part in first["loc"])
        raise ConfigError(f"invalid environment option {where!r}: {first['msg']}") from None
    except Exception as exc:
        raise ConfigError(f"invalid environment options: {exc}") from exc
    return config, opened or Dataset.open(config.dataset, backend=config.backend)


def not_served() -> dict[str, object]:
    """``info["state"]`` of a sample whose state is not served yet (nothing live was shown, nothing checked)."""
    return {"check": "not served", "faults": [], "differences": []}


def fit_text(value: str, limit: int) -> str:
    """Fit text into a Text space: cut to the limit, replace characters outside the charset."""
    value = value[:limit]
    if not all(ch in _CHARSET_SET for ch in value):
        value = "".join(ch if ch in _CHARSET_SET else "\ufffd" for ch in value)
    return value


class ThemistoEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """Predict the next cell (or a cell's output) of a Jupyter development trajectory.

    See the module docstring for the turn structure; :class:`EnvConfig` for the options.
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
        limit = self.config.max_text_chars
        self.observation_space = spaces.Dict(
            {
                "history": text_space(limit),
                "cell": text_space(limit),
                "runtime": text_space(limit),
                "tool_result": text_space(limit),
                "tools_left": spaces.Discrete(self.config.tool_budget + 1),
            }
        )
        self.action_space = spaces.Dict(
            {
                "kind": spaces.Discrete(2),
                "tool": spaces.Discrete(len(TOOL_NAMES)),
                "args": text_space(2000),
                "text": text_space(limit),
            }
        )
        self._preload = tuple(imported_modules(self.trajectories.values(), submodules=True))
        self._pool: KernelPool | None = None  # warm kernels for the env's own state, taken at reset
        self._state = TrajectoryKernel(self._new_kernel)
        #: The tools an agent is offered (try_cell would reveal the output in the output task).
        self._tool_names = tuple(n for n in TOOL_NAMES if n != "try_cell" or self.config.task == "next-cell")
        if self.config.execution_score and self.config.task == "next-cell":
            _warn_unisolated(self.config.backend, "the execution score")
        self._disposable: DisposableKernels | None = None  # kernels for model-written code, on first use
        self._draw = 0  # predictions already scored for the current sample
        self._dataset_checked = False
        self._trajectory: Trajectory | None = None
        self._queue: list[Sample] = []
        self._sample: Sample | None = None
        self._report: StateReport | None = None  # how the current sample's state was served
        self._lost_backend: BackendUnavailableError | None = None  # raised at the next call
        self._sample_errors: list[str] = []  # infrastructure failures that touch the current sample
        self._tools_used = 0
        self._tool_cost_paid = 0.0  # what the current prediction's tool steps paid (refunded if unscored)
        self._tool_calls: list[dict[str, Any]] = []
        self._last_tool: str = ""
        self._runtime_text = ""

    # -- gymnasium API -------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``options`` may name ``trajectory`` (id or index) and ``sample`` (index
        into that trajectory's samples); otherwise the trajectory is drawn with the seeded RNG."""
        super().reset(seed=seed)
        self._raise_lost_backend()
        tid, start = reset_options(options, self.episode_ids)  # ConfigError: a bad option, before any change
        if tid is None:
            tid = self.episode_ids[int(self.np_random.integers(len(self.episode_ids)))]
        samples = self.episode_samples[tid]
        if not 0 <= start < len(samples):
            raise ConfigError(f"trajectory {tid} has {len(samples)} samples; sample {start} is out of range")
        self._trajectory = self.trajectories[tid]
        self._queue = list(samples[start:])
        self._draw = 0
        if self.config.warm_kernels and (self.config.observation != "static" or not self.config.lazy_state):
            if self._pool is None:
                self._pool = self._state.pool = self._shared_pool()
            self._pool.fill()  # a kernel on its way before the first state is needed
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
            if self._tools_used >= self.config.tool_budget:
                extra["forced_submission"] = True
                parsed = Prediction(text="")
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
        self._state.close()
        if self._pool is not None:
            self._pool.release()  # closed with the last env that holds it
            self._pool = self._state.pool = None
        if self._disposable is not None:
            self._disposable.close()
            self._disposable = None

    @property
    def code_timeout_s(self) -> float:
        """The time limit of model-written code (a prediction, a tried cell)."""
        return min(self.config.limits.timeout_s, MODEL_CODE_TIMEOUT_S)

    def disposable_kernels(self) -> DisposableKernels:
        """The kernels model-written code runs in (a pool of disposable kernels, started on first use,
        preloading the libraries the dataset's cells import)."""
        if self._disposable is None:
            self._disposable = DisposableKernels(
                self.config.backend,
                limits=self.config.limits,
                snapshot_dir=self.config.snapshot_dir,
                environment=self.environment,
                preload=imported_modules(self.trajectories.values()),
            )
        return self._disposable

    # -- bound state for agents ----------------------------------------------------------------------

    def tool_context(self) -> ToolContext:
        """The tools' view of the current state (for langchain tools bound to this env)."""
        if self._trajectory is None or self._sample is None:
            raise ConfigError("call reset() before using tools")
        self._ensure_served()
        sizes, memory = self._recorded_figures()
        trajectory, step = self._trajectory, self._sample.step

        def try_code(code: str) -> CodeRun:  # the try_cell tool: a disposable kernel, never this env's
            _warn_unisolated(self.config.backend, "the try_cell tool")
            return self.disposable_kernels().run(trajectory, step, code, timeout_s=self.code_timeout_s)

        return ToolContext(
            kernel=self._state.kernel,
            history=history_items(self._executed_steps()),
            recorded_sizes=sizes,
            recorded_memory=memory,
            try_code=try_code if self.config.task == "next-cell" else None,
            recorded_fingerprint=expected_fingerprint(trajectory, step),
        )

    @property
    def current_sample(self) -> Sample | None:
        """The sample being predicted (its target is for scoring code, never for agents)."""
        return self._sample

    # -- internals -------------------------------------------------------------------------------------

    @property
    def state_report(self) -> StateReport | None:
        """How the current sample's state was served and checked (None while it is not served yet)."""
        return self._report

    def serve_state(self) -> StateReport:
        """Bring the kernel to the current sample's state now, if it is not there yet, and say how it was
        served and checked (the env does this on its own when a tool or the ``full`` mode needs it)."""
        if self._sample is None:
            raise ConfigError("call reset() before serve_state()")
        self._ensure_served()
        assert self._report is not None
        return self._report

    def _ensure_served(self) -> None:
        if self._report is None:
            self._serve()

    def _raise_lost_backend(self) -> None:
        if self._lost_backend is not None:
            error, self._lost_backend = self._lost_backend, None
            self._state.position = None
            raise error

    def _recorded_figures(self) -> tuple[dict[str, int], int | None]:
        """Per-variable sizes and kernel memory recorded at build time for the current sample's state
        (what tools and ``full`` mode show, so that answers do not depend on how the state was reached)."""
        assert self._trajectory is not None and self._sample is not None
        step = self._sample.step
        if fresh_before(self._trajectory, step):
            return {}, None  # a fresh namespace: nothing recorded applies
        before = self._trajectory.steps[step - 1]
        return before.variables, before.memory_bytes

    def _shared_pool(self) -> KernelPool:
        """The process's pool of warm kernels for this env's kind of kernel (backend, limits, snapshot
        store, preloaded modules), shared with the other open envs of that kind."""
        config = self.config
        key = (config.backend, config.limits.model_dump_json(), config.snapshot_dir, self._preload, config.warm_kernels)
        key += (self.environment,)
        new_kernel = functools.partial(
            Kernel, config.backend, limits=config.limits, snapshot_dir=config.snapshot_dir, environment=self.environment
        )
        return shared_pool(key, new_kernel, size=config.warm_kernels, preload=self._preload)

    def _new_kernel(self) -> Kernel:
        return Kernel(
            self.config.backend,
            limits=self.config.limits,
            snapshot_dir=self.config.snapshot_dir,
            environment=self.environment,
        )

    def _executed_steps(self) -> list[Any]:
        """The steps executed before the current sample (the position follows from the sample)."""
        assert self._trajectory is not None and self._sample is not None
        return self._trajectory.steps[: self._sample.step]

    def _check_dataset(self) -> None:
        """Once, at the first kernel: say in one line what would keep states from being checked or
        snapshots from loading (stale fingerprints; packages the snapshots' writer had and this kernel
        has not, or has at another version). Each snapshot is still tried and checked: one that does not
        load, or loads into another state, is passed over for replay."""
        if self._dataset_checked:
            return
        self._dataset_checked = True
        stale = sorted(t.id for t in self.trajectories.values() if t.fingerprint_version != FINGERPRINT_VERSION)
        if stale:
            log.warning(
                "%d trajectories of %s carry no current state fingerprints (%s): their served states are not "
                "checked; rebuild the dataset with `themisto data build` to check them.",
                len(stale),
                self.dataset_dir,
                ", ".join(stale[:3]) + (", ..." if len(stale) > 3 else ""),
            )
        manifest = self.dataset.manifest
        if not manifest.snapshots or not manifest.packages:
            return
        live = self._state.kernel.package_versions(sorted(manifest.packages))
        differ = [
            f"{name} {want} (kernel: {live.get(name)})"
            for name, want in sorted(manifest.packages.items())
            if live.get(name) != want
        ]
        if differ:
            log.warning(
                "the %s kernel lacks packages the snapshots of %s were written with: %s; snapshots that do not "
                "load are replayed instead (slower). Rebuild with `themisto data build ... --backend %s`.",
                self.config.backend,
                self.dataset_dir,
                ", ".join(differ),
                self.config.backend,
            )

    def _serve(self) -> None:
        """Bring the kernel to the current sample's state and check it; record what happened."""
        assert self._trajectory is not None and self._sample is not None
        try:
            self._check_dataset()
            self._report = self._state.serve(self._trajectory, self._sample.step)
        except BackendUnavailableError:
            raise  # the engine is gone: stop (in one line) rather than flag every sample after this one
        except InfrastructureError as exc:
            self._report = StateReport(self._trajectory.id, self._sample.step, route="failed")
            self._sample_errors.append(f"{type(exc).__name__}: {exc}")

    def _recover(self, error: InfrastructureError) -> str:
        """Bring a failed kernel back to the current sample's state; describe what happened."""
        self._state.taint()
        self._serve()
        return f"{type(error).__name__}: {error} (recovered: kernel restarted and state restored)"

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
            self._tools_used -= 1  # not the agent's fault
            return "The tool could not run because the sandbox failed; it was recovered: try again."
        self._tool_calls.append({"tool": call.tool, "args": call.args, "ok": result.ok})
        extra["tool_result"] = asdict(result)
        return result.text

    @property
    def scoring_rule(self) -> ScoringRule:
        """The env options that enter the reward (weights, tool cost, execution score)."""
        return self.config.scoring_rule()

    def execution_run(self, sample: Sample) -> ExecutionRun | None:
        """How a prediction of ``sample`` is run for the execution score (a disposable kernel in the state
        before its target step, never this env's kernel); None when the score does not apply."""
        if not self.config.execution_score or sample.task != "next-cell":
            return None
        trajectory = self.trajectories[sample.trajectory_id]
        return execution_run(self.disposable_kernels(), trajectory, sample.step, timeout_s=self.code_timeout_s)

    def score_prediction(self, text: str) -> SampleScore:
        """Score a prediction of the current sample as the next prediction step would, without taking the
        step (:func:`~themisto_env.scoring.score.score_sample` with this sample's tool calls, faults and
        state check)."""
        if self._sample is None:
            raise ConfigError("call reset() before score_prediction()")
        report = self._report
        mismatch = None
        if report is not None and report.check == "mismatch":
            mismatch = "; ".join(report.differences[:10]) or "the state differs"
        return score_sample(
            text,
            self._sample.target,
            task=self._sample.task,
            rule=self.scoring_rule,
            tools_used=self._tools_used,
            execution=self.execution_run(self._sample),
            faults=self._sample_errors,
            state_mismatch=mismatch,
        )

    def _submit(
        self, prediction: Prediction, extra: dict[str, Any]
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Score the prediction (the step pays the sample's reward less what its tool steps already paid:
        the sample's steps sum to ``SampleScore.reward``, or to 0 when the sample is unscored)."""
        assert self._sample is not None and self._trajectory is not None
        sample = self._sample
        scored = self.score_prediction(prediction.text)
        self._sample_errors = [scored.infrastructure_error] if scored.infrastructure_error else []
        value = (scored.reward if scored.reward is not None else 0.0) + self._tool_cost_paid
        extra.update(dict(scored))
        extra["tool_calls"] = list(self._tool_calls)
        extra["scored_sample_id"] = sample.id
        report = self._report
        if report is not None and report.faults:
            extra["recovered"] = list(report.faults)
        extra["scored_state"] = report.as_dict() if report is not None else not_served()
        extra["scored_draw"] = self._draw
        if self._draw + 1 < self.config.samples:  # another prediction for the same sample, same state
            self._draw += 1
            self._tools_used, self._tool_calls, self._last_tool, self._tool_cost_paid = 0, [], "", 0.0
            return self._observation(), value, False, False, self._info(**extra)
        self._draw = 0
        self._queue.pop(0)
        terminated = not self._queue
        if terminated:
            obs = self._observation()
        else:
            try:
                obs = self._begin_sample()
            except BackendUnavailableError as exc:  # S is scored: report it; the next call raises
                self._lost_backend = exc
                obs = self._observation()
        return obs, value, terminated, False, self._info(**extra)
