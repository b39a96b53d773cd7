"""The run's summary: ``prediction_failures`` counts every draw of pass@k rows and each row of one
prediction (issue 21)."""

from __future__ import annotations

from typing import Any

from themisto_env.run.results import ResultRow
from themisto_env.run.summary import summarize


def _draw(failed: str | None) -> dict[str, Any]:
    scores = {"exact_match": 0.0, "rouge_l": 0.5, "chrf": 0.5}
    return {"prediction": "x", "scores": scores, "reward": 0.5, "prediction_failed": failed, "tool_calls": []}


def _row(sample: int, draws: list[dict[str, Any]] | None, failed: str | None = None) -> ResultRow:
    fields: dict[str, Any] = {
        "sample_id": f"t/next-cell/{sample}",
        "trajectory_id": "t",
        "step": sample,
        "agent": "a",
        "task": "next-cell",
        "observation": "static",
        "backend": "local",
        "prediction": "x",
        "target": "y",
        "scores": {"exact_match": 0.0, "rouge_l": 0.5, "chrf": 0.5},
        "reward": 0.5,
        "seconds": 0.1,
        "prediction_failed": draws[0]["prediction_failed"] if draws else failed,
    }
    if draws is not None:
        fields["draws"] = draws
    return ResultRow.model_validate(fields)


def test_prediction_failures_count_every_draw() -> None:
    rows = [
        _row(1, [_draw(None), _draw("timeout"), _draw("raised: ValueError")]),  # the first draw did not fail
        _row(2, [_draw("exit"), _draw(None), _draw(None)]),
        _row(3, None, failed="memory"),  # a row of one prediction
        _row(4, None),
    ]
    assert summarize(rows)["prediction_failures"] == 4
