"""The public names of [`themisto_env.build`][themisto_env.build], a line each (``__init__.py`` imports each on first
use)."""

from .builder import BuildReport as BuildReport
from .builder import build_dataset as build_dataset
from .builder import use_kernel_environment as use_kernel_environment
