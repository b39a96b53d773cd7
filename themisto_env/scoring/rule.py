"""The reward rule, its one home: the weights of the metrics (`RewardWeights`), the metric reward (`reward`, a
weighted mean of a sample's scores) and the options that enter a sample's reward (`ScoringRule`), which
[`score_sample`][themisto_env.scoring.score_sample] applies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from themisto_env.metrics import Score

__all__ = ["RewardWeights", "ScoringRule", "reward"]


class RewardWeights(BaseModel):
    """Weights of the per-sample scores in the reward (a config boundary, so validated).

    The defaults, ROUGE-L 0.5 and chrF 0.5 and exact match 0, are chosen for training: exact match is
    all-or-nothing and rare for whole cells, so it gives almost no signal, while ROUGE-L (right tokens
    in the right order) and chrF (character n-grams, which also credit near-misses such as a misspelt
    name, and which is defined for outputs without letters such as ``[]``) are graded. An exactly
    right answer still earns the full reward through ``full_on_exact_match``.

    ``execution`` is the share of the execution score in a sample's reward when the execution score is
    on (next-cell): ``(1 - execution) * metric reward + execution * execution score``; the rule is
    applied in one place, [`score_sample`][themisto_env.scoring.score_sample] (see
    docs/reward.md).

    Attributes:
        exact_match: Weight of exact match, >= 0.
        rouge_l: Weight of ROUGE-L F1, >= 0.
        chrf: Weight of chrF, >= 0.
        full_on_exact_match: When true, an exact match earns 1.0 whatever the weights. Without it a
            perfect answer can earn less than 1: ROUGE-L is 0 for a reference with no ASCII letter or
            digit (``[]``, ``{}``, ``---``), and both ROUGE-L and chrF are 0 when both texts are empty.
        execution: Weight of the execution score in the reward when it is on, in [0, 1] (0.5: as much
            as the text metrics together). Not used by [`reward`][themisto_env.scoring.reward], which is the metric
            reward.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    exact_match: float = Field(0.0, ge=0.0)
    rouge_l: float = Field(0.5, ge=0.0)
    chrf: float = Field(0.5, ge=0.0)
    full_on_exact_match: bool = True
    execution: float = Field(0.5, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _not_all_zero(self) -> RewardWeights:
        if self.exact_match + self.rouge_l + self.chrf <= 0.0:
            raise ValueError("reward weights are all zero: give at least one of exact_match, rouge_l, chrf")
        return self


_DEFAULT_WEIGHTS = RewardWeights()


def reward(score: Score, weights: RewardWeights | None = None) -> float:
    """The weighted mean of a sample's scores, in [0, 1].

    Args:
        score: The sample's scores.
        weights: The weights; the defaults of [`RewardWeights`][themisto_env.scoring.RewardWeights] when None.

    Returns:
        ``(w_em * exact_match + w_rouge * rouge_l + w_chrf * chrf) / (w_em + w_rouge + w_chrf)``, or
        1.0 for an exact match when ``weights.full_on_exact_match``.
    """
    w = _DEFAULT_WEIGHTS if weights is None else weights
    if w.full_on_exact_match and score.exact_match == 1.0:
        return 1.0
    total = w.exact_match + w.rouge_l + w.chrf
    value = (w.exact_match * score.exact_match + w.rouge_l * score.rouge_l + w.chrf * score.chrf) / total
    return min(1.0, max(0.0, value))


class ScoringRule(BaseModel):
    """How a prediction is scored: the env options that enter the reward.

    Attributes:
        weights: The weights of the metrics, and ``weights.execution`` of the execution score.
        tool_cost: Subtracted from the reward for each tool call.
        execution_score: Whether next-cell predictions are also scored by running them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: RewardWeights = Field(default_factory=RewardWeights)
    tool_cost: float = Field(0.0, ge=0.0)
    execution_score: bool = False
