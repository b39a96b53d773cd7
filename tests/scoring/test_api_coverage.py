"""API metrics an empty prediction cannot earn (issue 22): a target that calls no API leaves them out."""

from __future__ import annotations

from themisto_env.scoring.score import score_sample


def test_a_target_calling_no_api_has_no_api_metrics() -> None:
    empty = score_sample("", "df.shape", task="next-cell")
    assert "api_f1" not in empty.scores and "api_precision" not in empty.scores
    assert {"exact_match", "rouge_l", "chrf"} <= set(empty.scores)
    called = score_sample("", "df.head()", task="next-cell")
    assert called.scores["api_f1"] == 0.0  # nothing predicted against a call: no credit
    right = score_sample("df.head(3)", "df.head()", task="next-cell")
    assert right.scores["api_f1"] == 1.0
    assert "api_f1" not in score_sample("", "x", task="output").scores


def test_the_summary_says_how_many_samples_the_api_metrics_cover() -> None:
    from themisto_env.commands.run import summary_table
    from themisto_env.run.results import ResultRow
    from themisto_env.run.summary import summarize

    def row(i: int, target: str) -> ResultRow:
        scored = score_sample("", target, task="next-cell")
        return ResultRow.model_validate(
            {
                "sample_id": f"t{i % 2}/next-cell/{i}",
                "trajectory_id": f"t{i % 2}",
                "step": i,
                "task": "next-cell",
                "agent": "silent",
                "observation": "static",
                "backend": "local",
                "seconds": 0.1,
                "target": target,
                "prediction": "",
                "scores": scored.scores,
                "reward": scored.reward,
            }
        )

    summary = summarize([row(1, "df.shape"), row(2, "df.head()"), row(3, "x = 1"), row(4, "df.describe()")])
    assert summary["samples"] == 4 and summary["api_samples"] == 2
    assert summary["api_f1"]["mean"] == 0.0  # an agent that says nothing earns no API credit
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(summary_table(summary))
    assert "api_f1 (2 of 4)" in console.export_text()
