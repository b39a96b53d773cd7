"""The public names of `themisto_env.sandbox.kernel.helper`, a line each (``__init__.py`` imports each on
first use): the host's side of the helper (its source) and the names the host shares with it."""

from ._display import OPTIONS_KEY as OPTIONS_KEY
from ._fingerprint import FINGERPRINT_VERSION as FINGERPRINT_VERSION
from ._fingerprint import value_fingerprint as value_fingerprint
from ._source import helper_source as helper_source
