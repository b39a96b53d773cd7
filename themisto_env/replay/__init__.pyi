"""The public names of [`themisto_env.replay`][themisto_env.replay], a line each (``__init__.py`` imports each on first
use)."""

from .dataset import Dataset as Dataset
