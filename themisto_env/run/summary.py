"""A run's summary (``summary.json``): per-metric means with bootstrap intervals, failure counts, spending.

`summarize` reads [`ResultRow`][themisto_env.run.ResultRow] s, the same model the runner writes
and report, view and compare read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from themisto_env.metrics import API_SEQUENCE_METRICS, METRICS, Score, aggregate, estimate_means
from themisto_env.run.config import RunConfig
from themisto_env.run.costs import per_sample_estimates
from themisto_env.run.results import TIMING_KINDS, ResultRow
from themisto_env.scoring.passk import summarize_draws

USAGE_TOTALS = (
    "model_calls",
    "input_tokens",
    "output_tokens",
    "tool_calls",
    "cached_calls",
    "cached_input_tokens",
    "cached_output_tokens",
    "retries",
    "rate_limited",
)
"""The [`AgentUsage`][themisto_env.agents.AgentUsage] counts summed into ``summary.json``'s ``usage``."""


def _failed_draws(row: ResultRow) -> int:
    """How many of a row's predictions failed in their own code (each of its draws, with ``attempts=K``)."""
    if row.draws:
        return sum(1 for draw in row.draws if draw.prediction_failed)
    return 1 if row.prediction_failed else 0


def summarize(rows: Sequence[ResultRow], config: RunConfig | None = None) -> dict[str, Any]:
    """Per-metric means over the scored samples (infrastructure failures out), with bootstrap intervals
    that resample whole trajectories (the samples of one trajectory are correlated).

    The metrics ([`METRICS`][themisto_env.metrics.METRICS], and for next-cell runs
    [`API_SEQUENCE_METRICS`][themisto_env.metrics.API_SEQUENCE_METRICS] over the samples whose target calls an API,
    counted as ``api_samples``) and ``reward`` are those of each sample's first
    prediction (the last row of a sample wins). ``usage`` sums what the agent spent
    (`USAGE_TOTALS`) over every row, scored or not, the rows of attempts run again on resume
    included (their tokens were paid for too); ``usage.tokens_reported`` is False when some model call
    reported no token counts (the totals are then lower bounds). When rows have ``draws`` (``attempts=K``),
    `themisto_env.scoring.passk.summarize_draws` adds ``draws`` (K),
    ``best_of_k`` and, with the execution score, ``pass_at_k`` (``{"1": {"mean", "ci_low", "ci_high"}, ..., "K": ...}``)
    and ``pass_at_k_counts``. ``timing`` sums where the scored samples' time went (`timing_totals`; left
    out for rows of older runs, which do not say). ``per_sample`` holds the reward, tool calls and tokens per
    scored sample with the same intervals (`themisto_env.run.costs`)."""
    latest = {r.sample_id: r for r in rows}
    scored = [r for r in latest.values() if r.is_scored]
    first = scored[0] if scored else next(iter(latest.values()), None)
    summary: dict[str, Any] = {
        "agent": config.agent if config else first and first.agent,
        "model": first.model if first else None,
        "task": config.task if config else first and first.task,
        "observation": first.observation if first else None,
        "samples": len(scored),
        "infrastructure_failures": sum(1 for r in latest.values() if r.infrastructure_error),
        "state_mismatches": sum(1 for r in latest.values() if r.state_mismatch and not r.infrastructure_error),
        "model_errors": sum(
            1 for r in latest.values() if r.model_error and not r.infrastructure_error and not r.state_mismatch
        ),
        "prediction_failures": sum(_failed_draws(r) for r in scored),  # every draw's, not the first only
        "tool_calls": sum(len(r.tool_calls) for r in scored),
        "seconds": round(sum(r.seconds for r in scored), 2),
        "usage": usage_totals(rows),  # every attempt was paid for, the retried ones too
    }
    timing = timing_totals(scored)
    if timing is not None:
        summary["timing"] = timing
    if scored:
        corpus = aggregate(
            [Score(**{m: r.scores[m] for m in METRICS}) for r in scored],
            groups=[r.trajectory_id for r in scored],  # samples of a trajectory are correlated
        )
        for metric in METRICS:
            estimate = getattr(corpus, metric)
            summary[metric] = {"mean": estimate.mean, "ci_low": estimate.ci_low, "ci_high": estimate.ci_high}
        with_api = [r for r in scored if all(m in r.scores for m in API_SEQUENCE_METRICS)]
        if with_api:  # next-cell runs: JuICe's API-sequence metrics too, over the targets that call an API
            columns = {m: [r.scores[m] for r in with_api] for m in API_SEQUENCE_METRICS}
            estimates = estimate_means(columns, groups=[r.trajectory_id for r in with_api])
            summary.update({metric: asdict(estimate) for metric, estimate in estimates.items()})
            summary["api_samples"] = len(with_api)  # the samples whose target calls an API
        rewards = [r.reward for r in scored if r.reward is not None]  # SampleScore.reward: None only if unscored
        summary["reward"] = sum(rewards) / len(rewards) if rewards else None
        summary["per_sample"] = per_sample_estimates(scored)  # reward, tool calls, tokens, with intervals
        # pass@k lives in the scoring layer, which knows no run rows: it reads their dict form
        samples = config.attempts if config and config.attempts > 1 else None
        summary.update(summarize_draws([r.to_dict() for r in scored], samples))
    return summary


def timing_totals(rows: Iterable[ResultRow]) -> dict[str, Any] | None:
    """Where the time of ``rows`` went: seconds per kind (`TIMING_KINDS`)
    summed over the rows that say (``samples``: how many), or None when none does (rows of older runs)."""
    timed = [r.timing for r in rows if r.timing is not None]
    if not timed:
        return None
    totals: dict[str, Any] = {kind: round(sum(getattr(t, kind) for t in timed), 3) for kind in TIMING_KINDS}
    totals["samples"] = len(timed)
    return totals


def usage_totals(rows: Iterable[ResultRow]) -> dict[str, Any] | None:
    """What the agent spent over ``rows`` (`USAGE_TOTALS`), or None when no row says."""
    usages = [r.usage for r in rows if r.usage]
    if not usages:
        return None
    totals: dict[str, Any] = {name: sum(int(u.get(name) or 0) for u in usages) for name in USAGE_TOTALS}
    totals["tokens_reported"] = all(u.get("tokens_reported", True) for u in usages)
    return totals


__all__ = ["USAGE_TOTALS", "summarize", "timing_totals", "usage_totals"]
