"""The public names of [`themisto_env.state`][themisto_env.state], a line each (``__init__.py`` imports each on
first use)."""

from .check import StateReport as StateReport
from .provider import StateProvider as StateProvider
