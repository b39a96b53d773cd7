"""The one score of a prediction: [`score_sample`][themisto_env.scoring.score_sample] returns a
[`SampleScore`][themisto_env.scoring.SampleScore] holding its ``reward``.

Every path that scores a prediction calls it (the gym env, the TRL tool env and reward functions, the
inspect scorer, and through the env's ``info`` the runner and pass@k). The rule is stated once, in
docs/reward.md: the weighted text metrics, mixed with the execution score when it is on, minus the cost of
the tool calls. A sample touched by an infrastructure fault, or served in a state that differs from the
recording, is unscored (``reward`` None, with the flag that says why), never a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from themisto_env import tracing
from themisto_env.data.trajectory import Trajectory
from themisto_env.errors import BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.metrics import api_sequence, api_sequence_score, score
from themisto_env.scoring.execution import ExecutionScore, execution_score
from themisto_env.scoring.rule import ScoringRule, reward
from themisto_env.state.copies import DisposableKernels

__all__ = ["ExecutionRun", "SampleScore", "execution_run", "score_sample"]

#: Runs a prediction's code and scores its effects (None: the dataset recorded no effects to compare).
#: Raises `InfrastructureError` when the machinery failed, not the code.
ExecutionRun = Callable[[str], ExecutionScore | None]


class SampleScore(BaseModel):
    """The score of one prediction of one sample (its fields are also keys of the scoring step's ``info``).

    Attributes:
        scores: The text metrics (``exact_match``, ``rouge_l``, ``chrf``) and, for next-cell samples whose
            target calls an API, JuICe's API-sequence metrics (``api_precision``, ``api_recall``,
            ``api_f1``); each in [0, 1]. A target that calls nothing leaves them out: JuICe scores a
            prediction that calls nothing 1.0 against it, so an empty prediction would earn them.
        metric_reward: The weighted mean of the text metrics
            ([`themisto_env.scoring.reward`][themisto_env.scoring.reward]).
        execution_score: The execution score in [0, 1] (next-cell with the execution score on and
            effects recorded), else None.
        execution: Its parts: ``variables``, ``outputs``, ``passed``, ``failure`` (None without it).
        passed: Whether the prediction did what the target did (pass@k counts it), None without the
            execution score.
        prediction_failed: Why the prediction's own code failed (``exit``, ``timeout``, ``memory``, ...):
            the model's failure, scored 0 by the execution score.
        tools_used: The tool calls made for this prediction.
        tool_cost: What they cost in total (``tools_used * rule.tool_cost``).
        reward: The reward (the rule is in docs/reward.md); None when the sample is unscored.
        infrastructure_error: Why the machinery failed on this sample (unscored), if it did.
        state_mismatch: How the served state differed from the recording (unscored), if it did.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    scores: dict[str, float]
    metric_reward: float
    execution_score: float | None = None
    execution: dict[str, Any] | None = None
    passed: bool | None = None
    prediction_failed: str | None = None
    tools_used: int = 0
    tool_cost: float = 0.0
    reward: float | None
    infrastructure_error: str | None = None
    state_mismatch: str | None = None

    @property
    def scored(self) -> bool:
        """Whether the sample counts (no infrastructure fault, no state mismatch)."""
        return self.reward is not None

    @property
    def flags(self) -> dict[str, str | None]:
        """The trust flags: ``{"infrastructure_error": ..., "state_mismatch": ...}``."""
        return {"infrastructure_error": self.infrastructure_error, "state_mismatch": self.state_mismatch}


def execution_run(kernels: DisposableKernels, trajectory: Trajectory, step: int, *, timeout_s: float) -> ExecutionRun:
    """The `ExecutionRun` of a sample: its prediction runs in one of ``kernels``, brought to the
    state before ``step`` of ``trajectory``, within ``timeout_s``."""

    def run(code: str) -> ExecutionScore | None:
        return execution_score(kernels, trajectory, step, code, timeout_s=timeout_s)

    return run


def score_sample(
    prediction: str,
    target: str,
    *,
    task: Literal["next-cell", "output"],
    rule: ScoringRule | None = None,
    tools_used: int = 0,
    execution: ExecutionRun | None = None,
    faults: Sequence[str] = (),
    state_mismatch: str | None = None,
) -> SampleScore:
    """Score one prediction of one sample under a rule (the only place a reward is computed).

    Args:
        prediction: The predicted text, as it is scored (already read out of a model's reply).
        target: The sample's target.
        task: The sample's task (the execution score and the API-sequence metrics are next-cell only).
        rule: The weights, the tool cost and whether the execution score is on (defaults: metric reward).
        tools_used: The tool calls made for this prediction (each costs ``rule.tool_cost``).
        execution: Runs the prediction (`execution_run`); needed when the rule's execution score
            applies. Not called when the sample is already flagged (its reward would be None anyway).
        faults: Infrastructure failures already met while serving the sample or answering its tools.
        state_mismatch: How the served state differed from the recording, if it did.

    Returns:
        The [`SampleScore`][themisto_env.scoring.SampleScore].

    Raises:
        ConfigError: The execution score applies and no ``execution`` was given.
        BackendUnavailableError: The backend went away while running the prediction (the caller stops).
    """
    with tracing.span("themisto.score", {"themisto.task": task}, timed="scoring") as span:
        rule = rule or ScoringRule()
        text = score(prediction, target)
        scores = text.as_dict()
        if task == "next-cell" and api_sequence(target):  # else an empty prediction would score 1.0
            scores.update(api_sequence_score(prediction, target).as_dict())
        metric_reward = reward(text, rule.weights)
        faults = list(faults)
        executed: ExecutionScore | None = None
        if rule.execution_score and task == "next-cell" and not faults and state_mismatch is None:
            if execution is None:
                raise ConfigError("the execution score is on but score_sample() was given no execution run")
            with tracing.span("themisto.score.execution") as run_span:
                try:
                    executed = execution(prediction)
                except BackendUnavailableError:
                    raise
                except InfrastructureError as exc:  # the machinery, not the prediction: unscored
                    tracing.fail(run_span, exc)
                    faults.append(f"{type(exc).__name__}: {exc}")
                if executed is not None:
                    tracing.record(
                        run_span, {"themisto.score.passed": executed.passed, "themisto.score.failure": executed.failure}
                    )
        value = metric_reward
        if executed is not None:
            w = rule.weights.execution
            value = (1.0 - w) * metric_reward + w * executed.value
        cost = rule.tool_cost * tools_used
        unscored = bool(faults) or state_mismatch is not None
        scored = SampleScore(
            scores=scores,
            metric_reward=metric_reward,
            execution_score=executed.value if executed is not None else None,
            execution=(
                {
                    "variables": executed.variables,
                    "outputs": executed.outputs,
                    "passed": executed.passed,
                    "failure": executed.failure,
                }
                if executed is not None
                else None
            ),
            passed=executed.passed if executed is not None else None,
            prediction_failed=executed.failure if executed is not None else None,
            tools_used=tools_used,
            tool_cost=cost,
            reward=None if unscored else value - cost,
            infrastructure_error="; ".join(faults) or None,
            state_mismatch=state_mismatch,
        )
        tracing.record(
            span,
            {
                **{f"themisto.score.{name}": value for name, value in scored.scores.items()},
                "themisto.score.reward": scored.reward,
                "themisto.score.execution_score": scored.execution_score,
                "themisto.score.unscored": scored.reward is None,
            },
        )
        return scored
