"""Scores of a prediction beyond the text metrics: the execution score and pass@k.

Owns running a next-cell prediction from the pre-target state and comparing its effects with the recorded
cell's (``execution``) and pass@k over several draws (``passk``). The text metrics (exact match, ROUGE-L,
chrF) are :mod:`themisto_env.metrics`. Names are re-exported lazily: importing this package imports none
of its modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports

if TYPE_CHECKING:
    from themisto_env.scoring.execution import ExecutionScore, execution_score
    from themisto_env.scoring.passk import pass_at_k, summarize_draws

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.scoring.execution": ("ExecutionScore", "execution_score"),
        "themisto_env.scoring.passk": ("pass_at_k", "summarize_draws"),
    },
)

__all__ = ["ExecutionScore", "execution_score", "pass_at_k", "summarize_draws"]
