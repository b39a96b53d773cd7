"""Metrics: exact match, ROUGE-L F1 and chrF per sample; corpus means with confidence intervals.

Per sample, [`score`][themisto_env.metrics.score] returns a [`Score`][themisto_env.metrics.Score] with ``exact_match``,
``rouge_l`` and ``chrf``, each in [0, 1]. ROUGE-L and chrF are identical in value to the reference implementations
(tested on many pairs), only faster:

- ``rouge_l == rouge_score.rouge_scorer.RougeScorer(["rougeL"]).score(reference, prediction)["rougeL"]
  .fmeasure`` (default tokenizer, no stemmer), with the LCS computed by rapidfuzz;
- ``chrf == sacrebleu.sentence_chrf(prediction, [reference]).score / 100`` (chrF2, character order 6,
  whitespace removed), with the n-gram matching done in numpy;
- ``exact_match`` compares after `normalize_for_exact_match` (trailing
whitespace of each line
  and leading/trailing blank lines removed, nothing else).

Over a corpus, [`aggregate`][themisto_env.metrics.aggregate] gives each metric's mean with a seeded percentile bootstrap
interval, and [`compare_paired`][themisto_env.metrics.compare_paired] compares two runs on the same samples (mean
difference, paired bootstrap interval, wins/ties/losses); given ``groups`` (a trajectory id per sample), both resample
whole trajectories, since samples of one trajectory are correlated. The reward made of them is
[`themisto_env.scoring`][themisto_env.scoring]'s.

For next-cell predictions, [`api_sequence_score`][themisto_env.metrics.api_sequence_score] adds JuICe's API-sequence
precision, recall and F1 (an `ApiSequenceScore`; its ``as_dict()`` is keyed by
[`API_SEQUENCE_METRICS`][themisto_env.metrics.API_SEQUENCE_METRICS]), from the API calls
[`api_sequence`][themisto_env.metrics.api_sequence] reads in each cell.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
