"""Comparing runs on the same samples (``themisto compare RUN_A RUN_B [RUN...]``): two with `compare_runs`,
any number with `compare_many` (each against the first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from themisto_env.errors import DataError
from themisto_env.metrics import METRICS, Score, compare_paired
from themisto_env.run.costs import paired_costs, per_sample_estimates
from themisto_env.run.results import ResultRow, read_results
from themisto_env.run.summary import summarize


def latest_rows(run_dir: str | Path) -> dict[str, ResultRow]:
    """A run's latest row per sample id, in the order the samples were first written (a sample run again on
    resume keeps its first place and shows its last row).

    Raises:
        DataError: The folder holds no results.
    """
    rows = read_results(run_dir)
    if not rows:
        raise DataError("no results.jsonl with results (run `themisto run --out` first)", path=run_dir)
    return {r.sample_id: r for r in rows}


def scored_rows(run_dir: str | Path) -> dict[str, ResultRow]:
    """A run's scored rows by sample id (infrastructure failures and mismatched states left out; the last
    row of a sample wins)."""
    return {sid: r for sid, r in latest_rows(run_dir).items() if r.is_scored}


def _score(row: ResultRow) -> Score:
    """The row's text metrics (rows may hold more scores, such as the API sequence's)."""
    return Score(**{m: row.scores[m] for m in METRICS})


def run_label(rows: dict[str, ResultRow], run_dir: str | Path) -> str:
    """``agent model (observation)`` of a run ([`label`][themisto_env.run.ResultRow.label]), or its
    folder name."""
    first = next(iter(rows.values()), None)
    return first.label if first else Path(run_dir).name


def compare_runs(run_a: str | Path, run_b: str | Path, *, examples: int = 3) -> dict[str, Any]:
    """Paired comparison of two runs on the samples both scored.

    Returns:
        Labels, the number of shared samples (and of their trajectories), per metric the means, mean
        difference (A - B) with a paired bootstrap interval and wins/ties/losses, and the samples where each
        run wins by most (ROUGE-L). The bootstrap resamples whole trajectories: samples of one trajectory
        are correlated ([`themisto_env.metrics.compare_paired`][themisto_env.metrics.compare_paired] with ``groups``).
        With a single shared trajectory the interval has zero width (nothing to resample) and no difference is
        significant. ``per_sample`` pairs the reward, tool calls and tokens per sample likewise
        (`themisto_env.run.costs.paired_costs`).
    """
    a, b = scored_rows(run_a), scored_rows(run_b)
    shared = sorted(set(a) & set(b))
    if not shared:
        raise DataError(f"the runs share no sample: compare runs of the same task and data ({run_a} vs {run_b})")
    comparison = compare_paired(
        [_score(a[s]) for s in shared],
        [_score(b[s]) for s in shared],
        groups=[a[s].trajectory_id for s in shared],
    )

    trajectories = len({a[s].trajectory_id for s in shared})

    def gap(sid: str) -> float:
        return float(a[sid].scores["rouge_l"] - b[sid].scores["rouge_l"])

    gaps = sorted(shared, key=gap)

    def example(sid: str) -> dict[str, Any]:
        return {
            "sample_id": sid,
            "target": a[sid].target,
            "a": a[sid].prediction,
            "b": b[sid].prediction,
            "rouge_l_a": a[sid].scores["rouge_l"],
            "rouge_l_b": b[sid].scores["rouge_l"],
        }

    return {
        "a": run_label(a, run_a),
        "b": run_label(b, run_b),
        "shared_samples": len(shared),
        "shared_trajectories": trajectories,
        "only_a": len(set(a) - set(b)),
        "only_b": len(set(b) - set(a)),
        "metrics": {
            m: {**comparison.as_dict()[m], "significant": trajectories > 1 and getattr(comparison, m).significant}
            for m in METRICS
        },
        "per_sample": paired_costs([a[s] for s in shared], [b[s] for s in shared]),
        "a_wins_most": [
            example(s) for s in reversed(gaps[-examples:]) if a[s].scores["rouge_l"] > b[s].scores["rouge_l"]
        ],
        "b_wins_most": [example(s) for s in gaps[:examples] if b[s].scores["rouge_l"] > a[s].scores["rouge_l"]],
    }


def compare_many(run_dirs: list[str | Path], *, examples: int = 3) -> dict[str, Any]:
    """Any number of runs (at least two): each one's means with intervals, and each run after the first
    paired with the first (`compare_runs`) on the samples the two share.

    Returns:
        ``runs``: per run its folder, label, task, scored samples, each metric's and `per_sample` figure's
        mean and interval; ``pairs``: `compare_runs` of the first run against each other one.

    Raises:
        DataError: Fewer than two runs, a run without results, or a run sharing no sample with the first.
    """
    if len(run_dirs) < 2:
        raise DataError(f"compare needs at least two runs, got {len(run_dirs)}")
    runs = []
    for run_dir in run_dirs:
        rows = scored_rows(run_dir)
        summary = summarize(list(rows.values()))
        runs.append(
            {
                "run": str(run_dir),
                "label": run_label(rows, run_dir),
                "task": summary["task"],
                "samples": summary["samples"],
                **{m: summary[m] for m in METRICS if m in summary},
                "per_sample": per_sample_estimates(list(rows.values())),
            }
        )
    pairs = [compare_runs(run_dirs[0], other, examples=examples) for other in run_dirs[1:]]
    return {"runs": runs, "pairs": pairs}
