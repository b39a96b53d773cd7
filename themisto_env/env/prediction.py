"""The prediction step of the env: a prediction of the current sample scored by the one score
(:func:`~themisto_env.scoring.score.score_sample`, README "Reward"), its step's reward and ``info``, and the
move to the sample's next draw (pass@k) or to the next sample.

:class:`PredictionStep` is the part of :class:`~themisto_env.env.core.ThemistoEnv` that does this job (a base
class of it, built on :class:`~themisto_env.env.serving.StateServing`: a prediction is scored with the faults
and the state check of the sample's serving).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from themisto_env.data.samples import Sample
from themisto_env.env.actions import Prediction
from themisto_env.env.serving import StateServing, not_served
from themisto_env.errors import BackendUnavailableError, ConfigError
from themisto_env.scoring.score import ExecutionRun, SampleScore, ScoringRule, execution_run, score_sample

__all__ = ["PredictionStep"]

Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]


class PredictionStep(StateServing):
    """Scoring the current sample's prediction (a base of :class:`~themisto_env.env.core.ThemistoEnv`,
    which keeps the episode's queue and the sample's tool calls read here)."""

    # set by the env
    _queue: list[Sample]
    _draw: int
    _tools_used: int
    _tool_cost_paid: float
    _tool_calls: list[dict[str, Any]]
    _last_tool: str

    if TYPE_CHECKING:  # the env's

        def _begin_sample(self) -> dict[str, Any]: ...
        def _observation(self) -> dict[str, Any]: ...
        def _info(self, **extra: Any) -> dict[str, Any]: ...

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

    def _submit(self, prediction: Prediction, extra: dict[str, Any]) -> Step:
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
