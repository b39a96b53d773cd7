"""Building a sample's [`ResultRow`][themisto_env.run.ResultRow] from the env steps that scored it.

The episode loop (`themisto_env.run.rollout`) collects, for each prediction of a sample, a
`Drawn`: the action, the env's reward and ``info`` (read through
`StepInfo`, whose score fields are [`SampleScore`][themisto_env.scoring.SampleScore]'s),
and what the agent says of the prediction (`agent_record`). `make_row` turns them into the row.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, NamedTuple

from themisto_env.env.actions import Prediction
from themisto_env.env.info import StepInfo
from themisto_env.run.config import RunConfig
from themisto_env.run.results import ResultRow, make_result_row


class AgentRecord(NamedTuple):
    """What an agent says of the prediction it just made.

    Attributes:
        usage: Its [`AgentUsage`][themisto_env.agents.AgentUsage] (None for agents without one).
        transcript: Its conversation (None for agents without one).
        model: Its model record (``{"provider", "name", "params"}``; None for agents without a model).
    """

    usage: Any
    transcript: list[dict[str, Any]] | None
    model: dict[str, Any] | None


class Drawn(NamedTuple):
    """One prediction of a sample, as the env scored it: the action, its step reward, the info of the step
    that scored it, the agent's record."""

    action: Any
    reward: float
    info: StepInfo
    record: AgentRecord


def now() -> str:
    """The current UTC time in ISO-8601 with milliseconds (a row's ``started_at`` and ``finished_at``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def agent_record(agent: Any) -> AgentRecord:
    """What the agent says of the prediction it just made: usage, transcript, model."""
    usage = getattr(agent, "usage", None)
    record = getattr(agent, "model_record", None)
    transcript = getattr(agent, "transcript", None)
    return AgentRecord(
        usage=usage if hasattr(usage, "as_dict") else None,
        transcript=list(transcript) if transcript is not None else None,
        model=record() if callable(record) else None,
    )


def prediction_text(action: Any) -> str:
    """The predicted text of an action (empty for anything but a [`Prediction`][themisto_env.env.Prediction])."""
    return action.text if isinstance(action, Prediction) else ""


def draw_fields(drawn: Drawn, sample: Any) -> dict[str, Any]:
    """One prediction of a sample: the fields of its `Draw` in a row's
    ``draws`` (validated with the row, by `make_row`)."""
    action, _, info, record = drawn
    return {
        "prediction": prediction_text(action),
        "scores": dict(info.scores or {}),  # next-cell: JuICe's API-sequence metrics among them
        "reward": info.reward,  # SampleScore.reward: None when the sample is unscored
        "execution_score": info.execution_score,
        "passed": info.passed,
        "prediction_failed": info.prediction_failed,
        "tool_calls": info.tool_calls or [],
        "usage": record.usage.as_dict() if record.usage is not None else None,
        "transcript": record.transcript,
    }


def make_row(
    config: RunConfig,
    options: dict[str, Any],
    sample: Any,
    drawn: list[Drawn],
    started: float,
    started_at: str,
    model_error: str | None = None,
    *,
    timing: dict[str, float] | None = None,
) -> ResultRow:
    """A sample's row: the first prediction's fields; with several predictions, also their ``draws``.

    The trust flags (``infrastructure_error``, ``state_mismatch``, ``recovered``) and ``model_error`` cover
    every prediction: a failure during any of them leaves the whole sample out (and runs it again on
    resume).

    Args:
        config: The run's config.
        options: The env's options (its ``observation`` mode).
        sample: The sample scored.
        drawn: Its predictions, in order.
        started: ``time.perf_counter()`` when the sample began.
        started_at: `now` when the sample began.
        model_error: Why the model calls of one of its predictions failed, if they did.
        timing: Where its time went: seconds by kind (the env's ``Episode.scored_seconds``), if known.

    Raises:
        ConfigError: The agent's transcript or model record is of the wrong shape.
    """
    action, _, info, record = drawn[0]
    usages = [d.record.usage for d in drawn if d.record.usage is not None]
    usage = sum(usages[1:], usages[0]) if usages else None  # the agent's spending over all its predictions
    infos = [d.info for d in drawn]

    def flag(key: str) -> Any:  # the env accumulates a sample's failures: its last report holds them all
        return next((getattr(i, key) for i in reversed(infos) if getattr(i, key)), None)

    fields: dict[str, Any] = {
        "sample_id": sample.id,
        "trajectory_id": sample.trajectory_id,
        "step": sample.step,
        "task": sample.task,
        "agent": config.agent,
        "observation": options["observation"],
        "backend": config.backend,
        "model": record.model,
        "prediction": prediction_text(action),
        "target": sample.target,
        "scores": dict(info.scores or {}),  # next-cell: JuICe's API-sequence metrics among them
        "reward": info.reward,  # SampleScore.reward (tool costs in): None when the sample is unscored
        "execution_score": info.execution_score,
        "tool_calls": info.tool_calls or [],
        "forced_submission": bool(info.forced_submission),
        "usage": usage.as_dict() if usage is not None else None,
        "transcript": record.transcript,
        "seconds": round(time.perf_counter() - started, 4),
        **({"timing": {kind: round(value, 4) for kind, value in timing.items()}} if timing is not None else {}),
        "started_at": started_at,
        "finished_at": now(),
        "infrastructure_error": flag("infrastructure_error"),
        "state_mismatch": flag("state_mismatch"),
        "recovered": flag("recovered"),
        "state_check": (info.scored_state or {}).get("check"),
        "state_served_by": (info.scored_state or {}).get("served_by"),
        "prediction_failed": info.prediction_failed,
        "model_error": model_error,
    }
    if len(drawn) > 1:
        fields["draws"] = [draw_fields(d, sample) for d in drawn]
    return make_result_row(fields)


__all__ = [
    "AgentRecord",
    "Drawn",
    "agent_record",
    "draw_fields",
    "make_row",
    "now",
    "prediction_text",
]
