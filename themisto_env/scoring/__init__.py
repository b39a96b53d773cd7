"""The one score of a prediction, and its parts beyond the text metrics: the reward rule, the execution
score and pass@k.

Owns the reward rule (``rule``: [`RewardWeights`][themisto_env.scoring.RewardWeights], the metric
[`reward`][themisto_env.scoring.reward] and ``ScoringRule``), the one score every path uses (``score``:
[`score_sample`][themisto_env.scoring.score_sample] returns a [`SampleScore`][themisto_env.scoring.SampleScore]),
running a next-cell prediction from the pre-target state and comparing its effects with the recorded cell's
(``execution``) and pass@k over several draws (``passk``). The text metrics (exact match, ROUGE-L, chrF) are
[`themisto_env.metrics`][themisto_env.metrics]. Names are re-exported lazily: importing this package imports
none of its modules.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
