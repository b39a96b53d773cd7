"""pass@k over K attempts per sample (``themisto run --attempts K``), and best-of-K for the text metrics.

With ``attempts=K`` the runner writes one row per sample with its K ``draws``. Per row, ``n`` draws have an
execution score and ``c`` of them passed
([`themisto_env.scoring.execution.ExecutionScore.passed`][themisto_env.scoring.ExecutionScore.passed]; a draw whose own
code failed, ``prediction_failed``, did not pass). [`pass_at_k`][themisto_env.scoring.pass_at_k] is the unbiased
estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on Code"): the probability that at least one
of k draws taken without replacement from the n passes. pass@1 is the fraction of passing draws.

`summarize_draws` gives the corpus figures: pass@k for k = 1, 2, 4, ... (powers
of 2 below K) and K, and best-of-K (per row, the best draw on each text metric), each as a mean with a bootstrap
interval computed exactly like the other metrics of a summary
([`themisto_env.metrics.aggregate`][themisto_env.metrics.aggregate] and
[`estimate_means`][themisto_env.metrics.estimate_means]: seeded percentile bootstrap over trajectories, 1000 resamples,
95%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from themisto_env.metrics import METRICS, Score, aggregate, estimate_means


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` draws of which ``c`` passed: ``1 - C(n-c, k) / C(n, k)``.

    Computed in the numerically stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which never
    forms the (huge) binomial coefficients.

    Raises:
        ValueError: ``k`` is not in ``1..n``, or ``c`` is not in ``0..n``.
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k} and n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c} and n={n}")
    if n - c < k:  # every k-subset holds a passing draw
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def k_values(samples: int) -> list[int]:
    """The k that a summary reports for ``samples`` draws: 1, the powers of 2 below ``samples``, and it."""
    ks = [1]
    while ks[-1] * 2 < samples:
        ks.append(ks[-1] * 2)
    if samples > 1:
        ks.append(samples)
    return ks


def draw_passed(draw: dict[str, Any]) -> bool:
    """Whether a draw passed; a draw whose own code failed (``prediction_failed``) never does."""
    return bool(draw.get("passed")) and not draw.get("prediction_failed")


def summarize_draws(rows: Sequence[dict[str, Any]], samples: int | None = None) -> dict[str, Any]:
    """pass@k and best-of-K over result rows that have ``draws`` (pass the scored rows only).

    Args:
        rows: Result rows; rows without ``draws`` are ignored.
        samples: K, the draws per sample; None takes the largest number of draws of a row.

    Returns:
        Empty when no row has draws. Otherwise ``draws`` (K); ``best_of_k``: per text metric, the mean over
        rows of the best draw's score, with its interval; and, when draws were execution-scored,
        ``pass_at_k``: ``{"1": {"mean", "ci_low", "ci_high"}, "2": ..., "K": ...}`` over the rows with an
        execution score (a row with fewer scored draws than k is left out of pass@k), and
        ``pass_at_k_counts``: the rows and draws counted, the draws that passed, and those whose own code
        failed.
    """
    drawn = [r for r in rows if r.get("draws")]
    if not drawn:
        return {}
    k_max = samples or max(len(r["draws"]) for r in drawn)
    best = aggregate(
        [Score(**{m: max(d["scores"][m] for d in r["draws"]) for m in METRICS}) for r in drawn],
        groups=[r.get("trajectory_id") for r in drawn],
    ).as_dict()
    summary: dict[str, Any] = {
        "draws": k_max,
        "best_of_k": {m: best[m] for m in METRICS},
    }
    counted = []  # (n, c, trajectory) of each row with execution-scored draws
    failures = 0
    for row in drawn:
        scored = [d for d in row["draws"] if d.get("execution_score") is not None]
        if scored:
            counted.append((len(scored), sum(draw_passed(d) for d in scored), row.get("trajectory_id")))
            failures += sum(bool(d.get("prediction_failed")) for d in scored)
    if counted:
        summary["pass_at_k"] = {}
        for k in k_values(k_max):
            rows_k = [(n, c, t) for n, c, t in counted if n >= k]
            if rows_k:
                estimate = estimate_means(
                    {"pass": [pass_at_k(n, c, k) for n, c, _ in rows_k]}, groups=[t for *_, t in rows_k]
                )["pass"]
                summary["pass_at_k"][str(k)] = {
                    "mean": estimate.mean,
                    "ci_low": estimate.ci_low,
                    "ci_high": estimate.ci_high,
                }
        summary["pass_at_k_counts"] = {
            "samples": len(counted),
            "draws": sum(n for n, *_ in counted),
            "passed": sum(c for _, c, _ in counted),
            "prediction_failures": failures,
        }
    return summary
