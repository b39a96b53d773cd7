"""chrF, equal in value to ``sacrebleu.sentence_chrf(prediction, [reference]).score / 100``, and faster.

sacrebleu's default chrF (character order 6, beta 2, whitespace removed, effective-order averaging): the
whitespace removal and the F-score use sacrebleu's own expressions in its order, so the floats are
identical. The clipped n-gram matches are counted with numpy: every n-gram is an integer in base ``B``
(characters are digits ``1..B-1``, so lengths get distinct code ranges), tagged with its side in the lowest
bit, and one sort of both sides' codes puts equal n-grams in runs. The codes fit int64 while ``B <= 1290``
(any pair of at most 1,289 distinct characters); beyond, a ``Counter`` does it.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import numpy as np
import numpy.typing as npt

__all__ = ["chrf"]

CHAR_ORDER = 6
BETA = 2
_MAX_BASE = 1290  # the largest base with 2 * base**6 < 2**63 (codes are tagged with one more bit)
_ASCII_BASE = 129  # code points 0..127 become digits 1..128

Stats = list[tuple[int, int, int]]


@lru_cache(maxsize=256)
def _order_bounds(base: int) -> npt.NDArray[np.int64]:
    """Codes of n-grams of length n lie in ``[base**(n-1), base**n)``: the boundaries for n = 0..6."""
    return np.array([base**n for n in range(CHAR_ORDER + 1)], dtype=np.int64)


def _digits(text: str) -> tuple[npt.NDArray[np.int64], int] | None:
    """Map the characters of ``text`` to digits ``1..base-1``; None if the pair needs too large a base."""
    if text.isascii():
        digits = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)
        base = _ASCII_BASE
    else:
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        highest = int(codes.max())
        if highest + 2 <= _MAX_BASE:
            digits, base = codes.astype(np.int64), highest + 2
        else:
            distinct, inverse = np.unique(codes, return_inverse=True)
            base = distinct.size + 1
            if base > _MAX_BASE:
                return None
            digits = inverse.astype(np.int64).reshape(-1)
    digits += 1
    return digits, base


def _matches_numpy(hyp: str, ref: str) -> list[int] | None:
    """Clipped n-gram match counts for n = 1..6 (entries past the shorter length are meaningless)."""
    encoded = _digits(hyp + ref)
    if encoded is None:
        return None
    digits, base = encoded
    len_hyp, len_ref = len(hyp), len(ref)
    top = min(CHAR_ORDER, len_hyp, len_ref)
    hyp_codes = [digits[:len_hyp]]
    ref_codes = [digits[len_hyp:]]
    codes = digits
    for n in range(2, top + 1):
        # codes[i] becomes the code of the n-gram starting at i of the concatenation; the n-grams that
        # straddle the hypothesis/reference boundary are sliced away.
        codes = codes[:-1] * base
        codes += digits[n - 1 :]
        hyp_codes.append(codes[: len_hyp - n + 1])
        ref_codes.append(codes[len_hyp:])
    n_hyp_codes = sum(map(len, hyp_codes))
    # One sorted array of 2 * code + side (0 hypothesis, 1 reference): equal codes form one run, and
    # over a run, sum(+1 per reference, -1 per hypothesis) = count_r - count_h. Per order,
    # sum(min(count_h, count_r)) = (n_h + n_r - sum(|count_r - count_h|)) / 2.
    tagged = np.concatenate(hyp_codes + ref_codes)
    tagged <<= 1
    tagged[n_hyp_codes:] += 1
    tagged.sort()
    keys = tagged >> 1
    run_start = np.empty(tagged.size, dtype=bool)
    run_start[0] = True
    np.not_equal(keys[1:], keys[:-1], out=run_start[1:])
    starts = run_start.nonzero()[0]
    signs = tagged & 1
    signs <<= 1
    signs -= 1
    # imbalance[j + 1] = |count_r - count_h| of run j, then cumulated: imbalance[j] sums runs 0..j-1.
    imbalance = np.zeros(starts.size + 1, dtype=np.int64)
    np.add.reduceat(signs, starts, out=imbalance[1:])
    np.abs(imbalance, out=imbalance)
    np.cumsum(imbalance, out=imbalance)
    # Runs are sorted by code, so the runs of order n are those with codes in [base**(n-1), base**n).
    at = imbalance[keys[starts].searchsorted(_order_bounds(base))].tolist()
    return [
        (max(len_hyp - n + 1, 0) + max(len_ref - n + 1, 0) - (at[n] - at[n - 1])) // 2 for n in range(1, CHAR_ORDER + 1)
    ]


def _matches_counter(hyp: str, ref: str) -> list[int]:
    """The same counts as `_matches_numpy`, the way sacrebleu computes them (any alphabet)."""
    matches = []
    for n in range(1, CHAR_ORDER + 1):
        hyp_ngrams = Counter([hyp[i : i + n] for i in range(len(hyp) - n + 1)])
        ref_ngrams = Counter([ref[i : i + n] for i in range(len(ref) - n + 1)])
        common = hyp_ngrams.keys() & ref_ngrams.keys()
        matches.append(sum(min(hyp_ngrams[g], ref_ngrams[g]) for g in common))
    return matches


def _f_score(stats: Stats) -> float:
    """sacrebleu's ``CHRF._compute_f_score`` (effective order, no eps smoothing), divided by 100."""
    eps = 1e-16
    factor = BETA**2
    avg_prec, avg_rec = 0.0, 0.0
    effective_order = 0
    for n_hyp, n_ref, n_match in stats:
        prec = n_match / n_hyp if n_hyp > 0 else eps
        rec = n_match / n_ref if n_ref > 0 else eps
        if n_hyp > 0 and n_ref > 0:
            avg_prec += prec
            avg_rec += rec
            effective_order += 1
    if effective_order == 0:
        avg_prec = avg_rec = 0.0
    else:
        avg_prec /= effective_order
        avg_rec /= effective_order
    if avg_prec + avg_rec:
        score = (1 + factor) * avg_prec * avg_rec
        score /= (factor * avg_prec) + avg_rec
        return 100 * score / 100
    return 0.0


def chrf(prediction: str, reference: str) -> float:
    """chrF (order 6, beta 2), equal to ``sacrebleu.sentence_chrf(prediction, [reference]).score / 100``.

    Args:
        prediction: The predicted text.
        reference: The reference (target) text.

    Returns:
        A float in [0, 1]; 0.0 when either text is empty or whitespace only (as in sacrebleu).
    """
    hyp = "".join(prediction.split())
    ref = "".join(reference.split())
    len_hyp, len_ref = len(hyp), len(ref)
    if not len_hyp or not len_ref:
        return 0.0
    matches = _matches_numpy(hyp, ref)
    if matches is None:
        matches = _matches_counter(hyp, ref)
    stats: Stats = []
    for n in range(1, CHAR_ORDER + 1):
        n_ref = len_ref - n + 1
        n_hyp = len_hyp - n + 1
        if n_ref <= 0:
            stats.append((0, 0, 0))  # no reference n-grams: sacrebleu reports no hypothesis ones either
        elif n_hyp <= 0:
            stats.append((0, n_ref, 0))
        else:
            stats.append((n_hyp, n_ref, matches[n - 1]))
    return _f_score(stats)
