"""The public names of [`themisto_env.scoring`][themisto_env.scoring], a line each (``__init__.py`` imports each on
first use)."""

from .execution import ExecutionScore as ExecutionScore
from .execution import execution_score as execution_score
from .passk import pass_at_k as pass_at_k
from .rule import RewardWeights as RewardWeights
from .rule import reward as reward
from .score import SampleScore as SampleScore
from .score import score_sample as score_sample
