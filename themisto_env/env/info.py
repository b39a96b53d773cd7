"""The ``info`` of the env's ``reset`` and ``step``: one typed model, `StepInfo`, whose keys are listed
once, in its docstring. ``StepInfo.model_dump()`` is the dict gymnasium sees (keys whose value is None are
left out, so ``"scored_sample_id" in info`` tells a scoring step from a tool call)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

__all__ = ["StepInfo"]


class StepInfo(BaseModel):
    """What the env tells alongside an observation. Nothing here reveals a target.

    Every step (and ``reset``):
        sample_id, trajectory_id, step, task: The sample now being predicted.
        observation_mode: ``static``, ``full`` or ``tools``.
        tool_names: The tools offered (empty outside the ``tools`` mode).
        samples_left: Samples of the episode not scored yet, the current one included.
        draw: Which prediction of the current sample the env waits for (pass@k; from 0).
        state: How the current sample's state was served and checked (``check``: ``verified``,
            ``mismatch``, ``unchecked`` or ``not served``; ``faults``; ``differences``).

    A tool step (only when they apply):
        action_error: Why the action was malformed (answered in ``tool_result`` of the observation).
        tool_result: The tool's answer: ``tool``, ``ok``, ``text``, ``error``, and ``data`` (the typed answer
            as JSON, whose facts the text shows; None on an error).
        infrastructure_error: The machinery failed during the call (recovered; the sample is unscored).
        tool_refused: True when the call came after the sample's budget was spent: nothing ran, it cost
            nothing, and the sample waits for its prediction.

    The step that scores a prediction:
        scored_sample_id: The sample scored (the current one may already be the next).
        scored_draw: Which of the sample's predictions was scored.
        scored_state: How the scored sample was served (``state`` of that sample).
        tool_calls: The tool calls made for the prediction (``{"tool", "args", "ok"}``).
        forced_submission: True when the runner submitted an empty prediction for an agent whose tool
            calls the env kept refusing (``REFUSALS_BEFORE_SUBMISSION`` in a row).
        recovered: Faults met and repaired (the state verified after) while serving the sample.
        The fields of [`SampleScore`][themisto_env.scoring.SampleScore]: scores, metric_reward,
        execution_score, execution, passed, prediction_failed, tools_used, tool_cost, reward (None,
        left out, when unscored), infrastructure_error, state_mismatch.
    """

    model_config = ConfigDict(extra="forbid")

    sample_id: str
    trajectory_id: str
    step: int
    task: str
    observation_mode: str
    tool_names: tuple[str, ...] = ()
    samples_left: int
    draw: int = 0
    state: dict[str, Any]
    # a tool step
    action_error: str | None = None
    tool_result: dict[str, Any] | None = None
    tool_refused: bool | None = None
    # the scoring step
    scored_sample_id: str | None = None
    scored_draw: int | None = None
    scored_state: dict[str, Any] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    forced_submission: bool | None = None
    recovered: list[Any] | None = None
    # SampleScore's fields (infrastructure_error also on a tool step)
    scores: dict[str, float] | None = None
    metric_reward: float | None = None
    execution_score: float | None = None
    execution: dict[str, Any] | None = None
    passed: bool | None = None
    prediction_failed: str | None = None
    tools_used: int | None = None
    tool_cost: float | None = None
    reward: float | None = None
    infrastructure_error: str | None = None
    state_mismatch: str | None = None

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}
