"""The public names of [`themisto_env.run`][themisto_env.run], a line each (``__init__.py`` imports each on first
use)."""

from .config import RunConfig as RunConfig
from .results import ResultRow as ResultRow
from .results import read_results as read_results
from .runner import run as run
