"""The gymnasium environment: one trajectory per episode, a live kernel, tools, predictions, rewards.

Turn structure of an episode (documented for training loops):

1. ``reset`` picks a trajectory (by ``seed``, or ``options={"trajectory": id, "sample": n}``) and
   brings a kernel to the state just before the first sample's target step by *restoring a snapshot*
   (replaying only the cells a snapshot cannot stand for).
2. For each sample, the agent takes any number of tool calls (``kind=0``; in ``tools`` mode; each costs
   ``tool_cost`` and at most ``tool_budget`` per sample), then one prediction (``kind=1``), which is
   scored by [`score_sample`][themisto_env.scoring.score_sample] (the rule: docs/reward.md); the
   prediction step pays the sample's reward less what its tool steps paid, so a sample's steps sum to
   ``info["reward"]`` (to 0 when the sample is unscored). Once the budget is spent, a further tool call
   is refused: nothing runs, it costs nothing, ``tool_result`` says so, ``info["tool_refused"]`` is True,
   and the sample stays open for its prediction (the runner submits an empty one for an agent after
   three refusals in a row).
3. The env then executes the ground-truth cells up to the next sample, and the next observation is that
   sample's. ``terminated`` is True after the trajectory's last sample.

The state is served lazily: the env brings its kernel to a sample's state only when something needs
the live state (a tool call, the ``full`` observation,
[`ThemistoEnv.tool_context`][themisto_env.env.ThemistoEnv.tool_context],
[`ThemistoEnv.serve_state`][themisto_env.env.ThemistoEnv.serve_state]). Observations come from the recording, so a
reset, a prediction and the move to the next sample cost no kernel work until a state is needed; the kernel then moves
straight to the sample it is asked for (forward over the recorded cells, or by snapshot). ``lazy_state=False`` serves
every sample as it begins. The execution score and ``try_cell`` never use the env's kernel.

Every served state is checked (`themisto_env.state.kernel`): the live namespace must match the
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
disposable kernel brought to the sample's state and discarded after (`themisto_env.state.copies`),
so nothing one prediction does reaches a later sample or another prediction; the ``try_cell`` tool
(next-cell task) runs the agent's candidates the same way. With ``attempts=K`` each
sample takes K predictions (pass@k), each scored on its own; the episode moves on after the K-th.

A lost backend (the Docker engine stopped answering) is not recovered from: the next ``step`` or
``reset`` that needs the backend (a state to serve, a disposable kernel) raises
[`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] with one line (a step that scored a sample
first returns that score; the next call raises), the sample it hit is left unscored, and a run resumes from it
once the engine is back. Steps that need no live state (predictions scored from the recording) go on.
A prediction whose own code kills its kernel, hits a limit, runs past the time limit or fools the
measurement under the execution score is the model's failure: it scores 0 with
``info["prediction_failed"]`` (a reason).

What happened to a sample is reported with that sample, never with its neighbour (``info`` is a
`StepInfo`; its docstring lists the keys). The ``info`` of the
step that scores sample S (``info["scored_sample_id"] == S``) carries S's ``SampleScore``, how S was served
(``scored_state``) and, when S cannot be trusted, ``infrastructure_error`` (the machinery failed while
serving S or during its tool calls: recovered from, never scored as a wrong answer) or
``state_mismatch`` (S was served in a state that differs from the recording). A failure while moving
on to sample S+1 belongs to S+1.

Nothing the agent reaches reveals the target: the kernel is in the state *before* the target step, the
history holds only executed steps, ``info`` carries ids and scores but no target text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym

from themisto_env.data.samples import Sample
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.config import EnvConfig, env_config_and_dataset
from themisto_env.env.episode import Episode
from themisto_env.env.record import EpisodeRecord
from themisto_env.env.scorer import Scorer
from themisto_env.env.spaces import action_space, observation_space
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import ToolContext
from themisto_env.scoring.rule import ScoringRule
from themisto_env.scoring.score import ExecutionRun, SampleScore
from themisto_env.state.check import StateReport
from themisto_env.state.copies import DisposableKernels
from themisto_env.state.kernel import TrajectoryKernel

__all__ = ["ThemistoEnv"]


class ThemistoEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """Predict the next cell (or a cell's output) of a Jupyter development trajectory.

    See the module docstring for the turn structure; [`EnvConfig`][themisto_env.env.EnvConfig] for the options. A
    gymnasium adapter (spaces, seeding, the gym signatures, rendering) over the env's parts, its members:
    `episode` ([`Episode`][themisto_env.env.Episode]: the turns), which holds
    [`server`][themisto_env.env.ThemistoEnv.server] ([`StateServer`][themisto_env.env.StateServer]: the live state of
    the current sample), [`scorer`][themisto_env.env.ThemistoEnv.scorer] ([`Scorer`][themisto_env.env.Scorer]: the rule
    and the disposable kernels) and [`record`][themisto_env.env.ThemistoEnv.record]
    ([`EpisodeRecord`][themisto_env.env.EpisodeRecord]: the samples left, the draw's tool calls, budget and faults).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, **options: Any) -> None:
        """Make an env over ``options`` ([`EnvConfig`][themisto_env.env.EnvConfig]; ``dataset`` may be an open
        [`Dataset`][themisto_env.replay.Dataset], shared with its other users)."""
        config, dataset = env_config_and_dataset(options)
        self.render_mode = render_mode
        #: The episode's turns over the env's parts (nothing started yet).
        self.episode = Episode(config, dataset)
        self.config: EnvConfig = config
        self.dataset = dataset
        self.dataset_dir: Path = dataset.path
        #: The kernel environment's id (None: the tool's own Python).
        self.environment: str | None = self.episode.environment
        self.trajectories: dict[str, Trajectory] = self.episode.trajectories
        self.samples: list[Sample] = self.episode.samples
        #: Each trajectory's samples in step order (the episodes).
        self.episode_samples: dict[str, list[Sample]] = self.episode.episode_samples
        self.episode_ids: list[str] = self.episode.episode_ids
        self.observation_space = observation_space(config.max_text_chars, config.tool_budget)
        self.action_space = action_space(config.max_text_chars)

    # -- gymnasium API -------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``options`` may name ``trajectory`` (id or index) and ``sample`` (an index
        into that trajectory's samples, or a sample id such as ``results.jsonl``'s ``sample_id``, whose
        trajectory is then found); otherwise the trajectory is drawn with the seeded RNG."""
        super().reset(seed=seed)
        return self.episode.reset(options, rng=self.np_random)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self.episode.step(action)

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.episode.current_sample is None:
            return None
        obs = self.episode.observation()
        return f"{obs['history']}\n# Next cell:\n{obs['cell']}\n{obs['tool_result']}"

    def close(self) -> None:
        self.episode.close()

    # -- the parts, and what callers read of them ------------------------------------------------------

    @property
    def server(self) -> StateServer:
        """The live state of the current sample."""
        return self.episode.server

    @property
    def scorer(self) -> Scorer:
        """The scoring rule and the disposable kernels model-written code runs in."""
        return self.episode.scorer

    @property
    def record(self) -> EpisodeRecord:
        """The samples left, the current draw's tool calls, budget, cost and faults."""
        return self.episode.record

    @property
    def _state(self) -> TrajectoryKernel:
        """The kernel serving the current sample (read by tests that kill it)."""
        return self.episode.server.kernel_owner

    @property
    def current_sample(self) -> Sample | None:
        """The sample being predicted (its target is for scoring code, never for agents)."""
        return self.episode.current_sample

    @property
    def state_report(self) -> StateReport | None:
        """How the current sample's state was served and checked (None while it is not served yet)."""
        return self.episode.state_report

    def serve_state(self) -> StateReport:
        """Bring the kernel to the current sample's state now, if it is not there yet, and say how it was
        served and checked (the env does this on its own when a tool or the ``full`` mode needs it)."""
        return self.episode.serve_state()

    def tool_context(self) -> ToolContext:
        """The tools' view of the current state (for langchain tools bound to this env)."""
        return self.episode.tool_context()

    def score_prediction(self, text: str) -> SampleScore:
        """Score a prediction of the current sample as the next prediction step would, without taking the
        step ([`score_sample`][themisto_env.scoring.score_sample] with this sample's tool calls, faults and
        state check)."""
        return self.episode.score_prediction(text)

    def execution_run(self, sample: Sample) -> ExecutionRun | None:
        """How a prediction of ``sample`` is run for the execution score (a disposable kernel in the state
        before its target step, never this env's kernel); None when the score does not apply."""
        return self.episode.scorer.execution_run(sample)

    @property
    def scoring_rule(self) -> ScoringRule:
        """The env options that enter the reward (weights, tool cost, execution score)."""
        return self.episode.scorer.rule

    @property
    def code_timeout_s(self) -> float:
        """The time limit of model-written code (a prediction, a tried cell)."""
        return self.episode.scorer.code_timeout_s

    def disposable_kernels(self) -> DisposableKernels:
        """The kernels model-written code runs in (a pool of disposable kernels, started on first use,
        preloading the libraries the dataset's cells import)."""
        return self.episode.scorer.disposable_kernels()
