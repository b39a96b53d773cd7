"""Per-sample scores: exact match, ROUGE-L F1 and chrF."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from themisto_env.metrics._chrf import chrf
from themisto_env.metrics._rouge import rouge_l

__all__ = ["METRICS", "Score", "exact_match", "normalize_for_exact_match", "score", "score_many"]

METRICS: tuple[str, ...] = ("exact_match", "rouge_l", "chrf")
"""The names of the per-sample metrics, in the order of [`Score`][themisto_env.metrics.Score]'s fields."""


@dataclass(frozen=True, slots=True)
class Score:
    """The scores of one prediction against its reference. A stable public contract.

    Attributes:
        exact_match: 1.0 when the texts are equal after
            `normalize_for_exact_match`, else 0.0.
        rouge_l: ROUGE-L F1 over rouge-score's tokens, in [0, 1].
        chrf: sacrebleu's sentence chrF divided by 100, in [0, 1].
    """

    exact_match: float
    rouge_l: float
    chrf: float

    def as_dict(self) -> dict[str, float]:
        """The scores as a plain dict keyed by metric name (for JSON)."""
        return asdict(self)


def normalize_for_exact_match(text: str) -> str:
    r"""The light normalisation applied before exact match, and nothing else.

    Trailing whitespace is removed from every line (lines are split on ``\n``; a ``\r`` before it is
    trailing whitespace, so CRLF and LF texts compare equal), then leading and trailing blank lines are
    dropped. Indentation, blank lines inside the text, case and everything else are kept.

    Args:
        text: A prediction or a reference.

    Returns:
        The normalised text.
    """
    lines = [line.rstrip() for line in text.split("\n")]
    start, end = 0, len(lines)
    while start < end and not lines[start]:
        start += 1
    while end > start and not lines[end - 1]:
        end -= 1
    return "\n".join(lines[start:end])


def exact_match(prediction: str, reference: str) -> float:
    """1.0 if the texts are equal after `normalize_for_exact_match`,
    else 0.0.

    Args:
        prediction: The predicted text.
        reference: The reference text.

    Returns:
        1.0 or 0.0. Two texts that are both empty (or blank) match.
    """
    if prediction == reference:
        return 1.0
    return 1.0 if normalize_for_exact_match(prediction) == normalize_for_exact_match(reference) else 0.0


def score(prediction: str, reference: str) -> Score:
    """Score one prediction against its reference.

    ``rouge_l`` equals ``rouge_score.rouge_scorer.RougeScorer(["rougeL"]).score(reference,
    prediction)["rougeL"].fmeasure`` and ``chrf`` equals ``sacrebleu.sentence_chrf(prediction,
    [reference]).score / 100``, exactly (both libraries are tested against on many pairs). Like those
    libraries, both are 0.0 when either side is empty, so two empty texts score exact match 1.0 and
    ROUGE-L and chrF 0.0; ROUGE-L is also 0.0 for texts without an ASCII letter or digit (``[]``).

    Args:
        prediction: The predicted text.
        reference: The reference (target) text.

    Returns:
        The three scores.

    Raises:
        TypeError: Either argument is not a ``str``.
    """
    if not isinstance(prediction, str) or not isinstance(reference, str):
        raise TypeError(f"score() takes two str, got {type(prediction).__name__} and {type(reference).__name__}")
    return Score(
        exact_match=exact_match(prediction, reference),
        rouge_l=rouge_l(prediction, reference),
        chrf=chrf(prediction, reference),
    )


def score_many(predictions: Sequence[str], references: Sequence[str]) -> list[Score]:
    """Score predictions against references pairwise (same order, same length).

    Args:
        predictions: The predicted texts.
        references: The reference texts, one per prediction.

    Returns:
        One [`Score`][themisto_env.metrics.Score] per pair, in order.

    Raises:
        ValueError: The sequences have different lengths.
        TypeError: An element is not a ``str``.
    """
    if len(predictions) != len(references):
        raise ValueError(
            f"score_many() needs as many references as predictions, got {len(references)} "
            f"references for {len(predictions)} predictions"
        )
    return [score(p, r) for p, r in zip(predictions, references, strict=True)]
