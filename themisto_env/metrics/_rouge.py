"""ROUGE-L F1, equal in value to ``rouge-score``'s, computed with rapidfuzz.

``rouge_score.rouge_scorer.RougeScorer(["rougeL"])`` (default tokenizer, no stemmer) lowercases the text,
replaces every run of characters other than ``[a-z0-9]`` with a space, splits on whitespace and drops
empty tokens. That is exactly ``re.findall("[a-z0-9]+", text.lower())``, which is what
`rouge_tokens` does (for ASCII text, faster, with one ``str.translate`` and a
``split``). The longest common subsequence of the two token lists is then computed with rapidfuzz's bit-parallel
``LCSseq`` instead of rouge-score's pure-Python dynamic programme, after mapping each distinct token of
the pair to a small integer (so tokens are compared by identity, with no hash collisions). Precision,
recall and F1 use the same float expressions as rouge-score, so the values are identical, not merely
close.
"""

from __future__ import annotations

import re
from collections import defaultdict
from itertools import count

from rapidfuzz.distance import LCSseq

__all__ = ["rouge_l", "rouge_tokens"]

_TOKEN_RE = re.compile(r"[a-z0-9]+")
# For ASCII text the same tokens come faster from one translate (letters lowercased, digits kept, every
# other character a space) and a split.
_ASCII_TABLE = str.maketrans(
    {chr(c): chr(c).lower() if chr(c).isalnum() else " " for c in range(128)},
)


def rouge_tokens(text: str) -> list[str]:
    """Tokenize as rouge-score's default tokenizer does without a stemmer.

    Args:
        text: Any text.

    Returns:
        The lowercase ASCII alphanumeric runs of ``text``, in order.
    """
    if text.isascii():
        return text.translate(_ASCII_TABLE).split()
    return _TOKEN_RE.findall(text.lower())


def rouge_l_from_tokens(prediction: list[str], reference: list[str]) -> float:
    """ROUGE-L F1 of two token lists, with rouge-score's arithmetic.

    Args:
        prediction: Tokens of the predicted text.
        reference: Tokens of the reference text.

    Returns:
        The F1 of LCS precision and recall; 0.0 when either list is empty.
    """
    if not prediction or not reference:
        return 0.0
    # Each distinct token gets the next integer the first time it is looked up (all in C).
    vocabulary: defaultdict[str, int] = defaultdict(count().__next__)
    token_id = vocabulary.__getitem__
    lcs = LCSseq.similarity(list(map(token_id, reference)), list(map(token_id, prediction)))
    precision = lcs / len(prediction)
    recall = lcs / len(reference)
    if precision + recall > 0:
        return 2 * precision * recall / (precision + recall)
    return 0.0


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1, equal to ``RougeScorer(["rougeL"]).score(reference, prediction)["rougeL"].fmeasure``.

    Args:
        prediction: The predicted text.
        reference: The reference (target) text.

    Returns:
        A float in [0, 1]; 0.0 when either text has no alphanumeric token.
    """
    return rouge_l_from_tokens(rouge_tokens(prediction), rouge_tokens(reference))
