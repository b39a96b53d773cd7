"""Metrics: exact match, ROUGE-L F1 and chrF per sample; corpus means with confidence intervals.

Per sample, [`score`][themisto_env.metrics.score] returns a [`Score`][themisto_env.metrics.Score] with
``exact_match``, ``rouge_l`` and ``chrf``, each in [0, 1] and equal to the reference implementations'.
Over a corpus, [`aggregate`][themisto_env.metrics.aggregate] gives each mean with a bootstrap interval and
[`compare_paired`][themisto_env.metrics.compare_paired] compares two runs, resampling whole trajectories
given ``groups``. [`api_sequence_score`][themisto_env.metrics.api_sequence_score] adds JuICe's API-sequence
scores for next-cell predictions. The reward made of them is [`themisto_env.scoring`][themisto_env.scoring]'s.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
