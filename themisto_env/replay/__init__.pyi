"""The public names of [`themisto_env.replay`][themisto_env.replay], a line each (``__init__.py`` imports each on first
use)."""

from .build import BuildReport as BuildReport
from .build import build_dataset as build_dataset
from .dataset import Dataset as Dataset
from .kernel_environment_registry import list_kernel_environments as list_kernel_environments
from .kernel_environment_spec import KernelEnvironmentRecord as KernelEnvironmentRecord
from .kernel_environment_spec import KernelEnvironmentSpec as KernelEnvironmentSpec
from .kernel_environments import dataset_kernel_environment as dataset_kernel_environment
from .kernel_environments import use_kernel_environment as use_kernel_environment
from .resolve import bundled_dataset_dir as bundled_dataset_dir
from .resolve import resolve_dataset as resolve_dataset
