"""The public names of [`themisto_env.build`][themisto_env.build], a line each (``__init__.py`` imports each on first
use)."""

from .builder import build_dataset as build_dataset
