"""Corpus aggregation: means with bootstrap confidence intervals, and paired comparison of two runs.

Both use the percentile bootstrap: resample the samples (the same resampled indices for every metric,
and for both runs in a paired comparison), compute the statistic on each resample, and take the
``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles. Resampling is vectorised with numpy
in chunks of bounded memory and driven by ``numpy.random.default_rng(seed)``: the same inputs and seed
give the same intervals on every machine.

Samples of one trajectory are not independent: a model that misreads a notebook early tends to miss its
later cells too. Given ``groups`` (one trajectory id per sample), both functions run a cluster bootstrap
instead: each resample draws whole trajectories with replacement (as many as there are) and the
statistic is the mean over all the samples of the drawn trajectories. With correlated samples this
interval is wider, and honest: resampling samples would treat ten near-copies of one judgement as ten
pieces of evidence. With one sample per trajectory it is the sample bootstrap. The point estimate (the
mean over samples) is the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from themisto_env.metrics._sample import METRICS, Score

__all__ = [
    "CorpusScore",
    "Estimate",
    "PairedComparison",
    "PairedDifference",
    "aggregate",
    "compare_paired",
    "estimate_means",
]

_CHUNK_ELEMENTS = 2_000_000  # resampled indices held in memory at once (16 MB of int64)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A corpus mean with its bootstrap confidence interval.

    Attributes:
        mean: The mean over the samples.
        ci_low: Lower end of the percentile bootstrap interval.
        ci_high: Upper end of the percentile bootstrap interval.
    """

    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, slots=True)
class CorpusScore:
    """Per-metric means and confidence intervals over a set of samples.

    Attributes:
        n: Number of samples.
        confidence: Confidence level of the intervals, e.g. 0.95.
        exact_match: Estimate for exact match.
        rouge_l: Estimate for ROUGE-L F1.
        chrf: Estimate for chrF.
    """

    n: int
    confidence: float
    exact_match: Estimate
    rouge_l: Estimate
    chrf: Estimate

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"n": ..., "confidence": ..., "rouge_l": {"mean": ..., ...}, ...}``."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """How run A differs from run B on one metric over the same samples.

    Attributes:
        mean_a: Mean of A.
        mean_b: Mean of B.
        mean_diff: Mean of A - B.
        ci_low: Lower end of the paired bootstrap interval of the mean difference.
        ci_high: Upper end of the paired bootstrap interval of the mean difference.
        wins: Samples where A scored higher than B (by more than the tie tolerance).
        ties: Samples where they are equal within the tie tolerance.
        losses: Samples where A scored lower than B.
    """

    mean_a: float
    mean_b: float
    mean_diff: float
    ci_low: float
    ci_high: float
    wins: int
    ties: int
    losses: int

    @property
    def significant(self) -> bool:
        """Whether the interval excludes zero (A and B differ at the chosen confidence)."""
        return self.ci_low > 0.0 or self.ci_high < 0.0


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """Per-metric paired comparison of run A against run B.

    Attributes:
        n: Number of paired samples.
        confidence: Confidence level of the intervals.
        exact_match: Difference in exact match.
        rouge_l: Difference in ROUGE-L F1.
        chrf: Difference in chrF.
    """

    n: int
    confidence: float
    exact_match: PairedDifference
    rouge_l: PairedDifference
    chrf: PairedDifference

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, like [`CorpusScore.as_dict`][themisto_env.metrics.CorpusScore.as_dict]."""
        return asdict(self)


def _as_matrix(scores: Sequence[Score], name: str) -> npt.NDArray[np.float64]:
    """An (n, 3) float matrix of the scores, columns in [`METRICS`][themisto_env.metrics.METRICS] order."""
    if len(scores) == 0:
        raise ValueError(f"{name} is empty: at least one score is needed to aggregate")
    return np.array([(s.exact_match, s.rouge_l, s.chrf) for s in scores], dtype=np.float64)


def _means(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Column means from correctly rounded sums (``math.fsum``): exact for constant columns."""
    return np.array([math.fsum(column) / len(column) for column in values.T], dtype=np.float64)


def _check(n_resamples: int, confidence: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")


def _cluster_index(groups: Sequence[Hashable] | None, n: int) -> npt.NDArray[np.int64] | None:
    """Each sample's cluster number (0, 1, ... in order of first appearance), or None without groups."""
    if groups is None:
        return None
    if len(groups) != n:
        raise ValueError(f"groups must name one trajectory per sample, got {len(groups)} for {n} samples")
    numbers: dict[Hashable, int] = {}
    return np.array([numbers.setdefault(g, len(numbers)) for g in groups], dtype=np.int64)


def _bootstrap_means(
    values: npt.NDArray[np.float64],
    n_resamples: int,
    seed: int,
    clusters: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.float64]:
    """Means of ``n_resamples`` resamples (with replacement) of the rows of ``values``: (n_resamples, k).

    With ``clusters`` (a cluster number per row, as `_cluster_index` gives), whole clusters are
    resampled and each resample's mean is over all the rows of the drawn clusters."""
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, values.shape[1]), dtype=np.float64)
    # Resample deviations from the mean, then add the mean back: a constant column gives exactly its
    # value in every resample, and the sums lose less precision.
    centre = _means(values)
    deviations = values - centre
    if clusters is None:
        n = values.shape[0]
        per_chunk = max(1, _CHUNK_ELEMENTS // n)
        columns = [np.ascontiguousarray(deviations[:, k]) for k in range(values.shape[1])]
        for start in range(0, n_resamples, per_chunk):
            stop = min(n_resamples, start + per_chunk)
            idx = rng.integers(0, n, size=(stop - start, n))
            for k, column in enumerate(columns):
                means[start:stop, k] = column[idx].mean(axis=1) + centre[k]
        return means
    n_clusters = int(clusters.max()) + 1
    sizes = np.bincount(clusters, minlength=n_clusters).astype(np.float64)
    sums = [np.bincount(clusters, weights=deviations[:, k], minlength=n_clusters) for k in range(values.shape[1])]
    per_chunk = max(1, _CHUNK_ELEMENTS // n_clusters)
    for start in range(0, n_resamples, per_chunk):
        stop = min(n_resamples, start + per_chunk)
        idx = rng.integers(0, n_clusters, size=(stop - start, n_clusters))
        drawn = sizes[idx].sum(axis=1)
        for k, column in enumerate(sums):
            means[start:stop, k] = column[idx].sum(axis=1) / drawn + centre[k]
    return means


def _interval(
    boot: npt.NDArray[np.float64], confidence: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
    return low, high


def aggregate(
    scores: Sequence[Score],
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> CorpusScore:
    """Mean of each metric over the samples, with a percentile bootstrap confidence interval.

    Args:
        scores: One [`Score`][themisto_env.metrics.Score] per sample.
        groups: The trajectory (any hashable id) of each sample, in the same order; given, the interval
            is a cluster bootstrap over trajectories (see the module docstring). None resamples samples.
        n_resamples: Number of bootstrap resamples.
        confidence: Confidence level of the intervals, in (0, 1).
        seed: Seed of the resampling; the same seed gives the same intervals.

    Returns:
        The sample count and, per metric, the mean and its interval. A percentile interval need not be
        centred on the mean; if rounding or very few resamples leave the mean outside it, the interval
        is widened to include the mean.

    Raises:
        ValueError: ``scores`` is empty, ``groups`` is not one per sample, or an argument is out of range.
    """
    _check(n_resamples, confidence)
    values = _as_matrix(scores, "scores")
    clusters = _cluster_index(groups, len(values))
    means = _means(values)
    low, high = _interval(_bootstrap_means(values, n_resamples, seed, clusters), confidence)
    estimates = {
        name: Estimate(
            mean=float(means[i]),
            ci_low=float(min(low[i], means[i])),
            ci_high=float(max(high[i], means[i])),
        )
        for i, name in enumerate(METRICS)
    }
    return CorpusScore(n=len(values), confidence=confidence, **estimates)


def estimate_means(
    columns: Mapping[str, Sequence[float]],
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Estimate]:
    """[`aggregate`][themisto_env.metrics.aggregate] for any named per-sample values (e.g. the API-sequence metrics of
    next-cell samples): each column's mean with the same seeded percentile (or, with ``groups``, trajectory)
    bootstrap interval.

    Raises:
        ValueError: No column, columns of different lengths, an empty column, or ``groups`` not one per
            sample.
    """
    _check(n_resamples, confidence)
    names = list(columns)
    lengths = {len(columns[name]) for name in names}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"estimate_means needs columns of one non-zero length, got {sorted(lengths)}")
    values = np.array([columns[name] for name in names], dtype=np.float64).T
    clusters = _cluster_index(groups, len(values))
    means = _means(values)
    low, high = _interval(_bootstrap_means(values, n_resamples, seed, clusters), confidence)
    return {
        name: Estimate(mean=float(means[i]), ci_low=float(min(low[i], means[i])), ci_high=float(max(high[i], means[i])))
        for i, name in enumerate(names)
    }


def compare_paired(
    scores_a: Sequence[Score],
    scores_b: Sequence[Score],
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    tie_tolerance: float = 1e-12,
) -> PairedComparison:
    """Compare run A with run B on the same samples (same order): mean differences A - B.

    The interval is a paired bootstrap: each resample draws sample indices once and uses them for both
    runs, so the per-sample pairing (and the correlation between runs) is kept. With ``groups`` it draws
    whole trajectories instead (a paired cluster bootstrap).

    Args:
        scores_a: Scores of run A, one per sample.
        scores_b: Scores of run B on the same samples, in the same order.
        groups: The trajectory of each sample, in the same order; given, trajectories are resampled.
        n_resamples: Number of bootstrap resamples.
        confidence: Confidence level of the intervals, in (0, 1).
        seed: Seed of the resampling.
        tie_tolerance: Per-sample differences with absolute value at most this count as ties.

    Returns:
        Per metric: both means, the mean difference with its interval, and win/tie/loss counts.

    Raises:
        ValueError: The runs are empty or of different lengths, ``groups`` is not one per sample, or an
            argument is out of range.
    """
    _check(n_resamples, confidence)
    if tie_tolerance < 0:
        raise ValueError(f"tie_tolerance must be non-negative, got {tie_tolerance}")
    if len(scores_a) != len(scores_b):
        raise ValueError(
            f"paired comparison needs the same samples in both runs, got {len(scores_a)} and {len(scores_b)} scores"
        )
    a = _as_matrix(scores_a, "scores_a")
    b = _as_matrix(scores_b, "scores_b")
    diff = a - b
    clusters = _cluster_index(groups, len(diff))
    mean_a, mean_b, mean_diff = _means(a), _means(b), _means(diff)
    low, high = _interval(_bootstrap_means(diff, n_resamples, seed, clusters), confidence)
    wins = (diff > tie_tolerance).sum(axis=0)
    losses = (diff < -tie_tolerance).sum(axis=0)
    differences = {
        name: PairedDifference(
            mean_a=float(mean_a[i]),
            mean_b=float(mean_b[i]),
            mean_diff=float(mean_diff[i]),
            ci_low=float(min(low[i], mean_diff[i])),
            ci_high=float(max(high[i], mean_diff[i])),
            wins=int(wins[i]),
            ties=int(len(diff) - wins[i] - losses[i]),
            losses=int(losses[i]),
        )
        for i, name in enumerate(METRICS)
    }
    return PairedComparison(n=len(diff), confidence=confidence, **differences)
