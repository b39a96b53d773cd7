"""The public names of [`themisto_env.sandbox`][themisto_env.sandbox], a line each (``__init__.py`` imports each on
first use)."""

from .environments.environment_registry import list_kernel_environments as list_kernel_environments
from .environments.environment_spec import KernelEnvironmentRecord as KernelEnvironmentRecord
from .environments.environment_spec import KernelEnvironmentSpec as KernelEnvironmentSpec
from .kernel.contract import IntrospectionLike as IntrospectionLike
from .kernel.contract import KernelLike as KernelLike
from .kernel.contract import SnapshotsLike as SnapshotsLike
from .kernel.core import Kernel as Kernel
from .kernel.launcher import BACKENDS as BACKENDS
from .kernel.launcher import KernelLauncher as KernelLauncher
from .kernel.launcher import launcher_class as launcher_class
from .kernel.spec import KernelSpec as KernelSpec
from .models import ExecutionResult as ExecutionResult
from .models import SandboxLimits as SandboxLimits
from .models import SnapshotInfo as SnapshotInfo
from .ray.kernel import RemoteKernel as RemoteKernel
from .ray.kernel import make_kernel as make_kernel
from .template.core import KernelTemplate as KernelTemplate
