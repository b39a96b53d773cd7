"""The public names of [`themisto_env.replay`][themisto_env.replay], a line each (``__init__.py`` imports each on first
use)."""

from .dataset import Dataset as Dataset
from .disposable import CodeRun as CodeRun
from .disposable import DisposableKernels as DisposableKernels
from .resolve import bundled_dataset_dir as bundled_dataset_dir
from .resolve import dataset_kernel_environment as dataset_kernel_environment
from .resolve import resolve_dataset as resolve_dataset
from .state import TrajectoryKernel as TrajectoryKernel
from .state_check import StateReport as StateReport
