"""The public names of :mod:`themisto_env.sandbox`, a line each (``__init__.py`` imports each on first use)."""

from .kernel import Kernel as Kernel
from .launcher import BACKENDS as BACKENDS
from .launcher import KernelLauncher as KernelLauncher
from .launcher import launcher_class as launcher_class
from .models import ExecutionResult as ExecutionResult
from .models import SandboxLimits as SandboxLimits
from .models import SnapshotInfo as SnapshotInfo
