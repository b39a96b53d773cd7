"""What a run's samples earn and spend, per sample, with intervals: the reward, tool calls and tokens.

`per_sample_estimates` is ``summary.json``'s ``per_sample`` (and a row of ``eval-set.json``); `paired_costs`
is ``compare``'s paired difference of the same figures on the samples two runs share. Both resample whole
trajectories, as the metrics' intervals do (`themisto_env.metrics.estimate_means` with ``groups``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from themisto_env.metrics import estimate_means
from themisto_env.run.results import ResultRow

PER_SAMPLE = ("reward", "tool_calls", "tokens")
"""The per-sample figures: the reward (``SampleScore.reward``, tool costs in), the tool calls the env
answered, and the model's tokens (input and output; 0 for agents without a model)."""


def sample_figures(row: ResultRow) -> dict[str, float]:
    """One scored row's `PER_SAMPLE` figures (an unscored reward counts as 0)."""
    usage = row.usage or {}
    return {
        "reward": float(row.reward or 0.0),
        "tool_calls": float(len(row.tool_calls)),
        "tokens": float(int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)),
    }


def per_sample_estimates(rows: Sequence[ResultRow]) -> dict[str, dict[str, float]]:
    """Each `PER_SAMPLE` figure's mean over the scored ``rows`` with its trajectory-bootstrap interval
    (``{"reward": {"mean", "ci_low", "ci_high"}, ...}``; empty without rows)."""
    if not rows:
        return {}
    figures = [sample_figures(r) for r in rows]
    columns = {name: [f[name] for f in figures] for name in PER_SAMPLE}
    estimates = estimate_means(columns, groups=[r.trajectory_id for r in rows])
    return {name: asdict(estimate) for name, estimate in estimates.items()}


def paired_costs(a: Sequence[ResultRow], b: Sequence[ResultRow]) -> dict[str, dict[str, Any]]:
    """A - B on each `PER_SAMPLE` figure over paired rows (the same samples, in the same order): both means,
    the mean difference and its paired trajectory-bootstrap interval, and whether it excludes 0."""
    if not a:
        return {}
    fa, fb = [sample_figures(r) for r in a], [sample_figures(r) for r in b]
    columns = {name: [x[name] - y[name] for x, y in zip(fa, fb, strict=True)] for name in PER_SAMPLE}
    groups = [r.trajectory_id for r in a]
    estimates = estimate_means(columns, groups=groups)
    several = len(set(groups)) > 1
    result = {}
    for name, estimate in estimates.items():
        result[name] = {
            "mean_a": sum(x[name] for x in fa) / len(fa),
            "mean_b": sum(y[name] for y in fb) / len(fb),
            "mean_diff": estimate.mean,
            "ci_low": estimate.ci_low,
            "ci_high": estimate.ci_high,
            "significant": several and (estimate.ci_low > 0.0 or estimate.ci_high < 0.0),
        }
    return result


__all__ = ["PER_SAMPLE", "paired_costs", "per_sample_estimates", "sample_figures"]
