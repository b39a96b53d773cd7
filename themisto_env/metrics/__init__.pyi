"""The public names of [`themisto_env.metrics`][themisto_env.metrics], a line each (``__init__.py`` imports each on
first use)."""

from ._api_sequence import API_SEQUENCE_METRICS as API_SEQUENCE_METRICS
from ._api_sequence import api_sequence as api_sequence
from ._api_sequence import api_sequence_score as api_sequence_score
from ._chrf import chrf as chrf
from ._corpus import aggregate as aggregate
from ._corpus import compare_paired as compare_paired
from ._corpus import estimate_means as estimate_means
from ._rouge import rouge_l as rouge_l
from ._sample import METRICS as METRICS
from ._sample import Score as Score
from ._sample import exact_match as exact_match
from ._sample import score as score
