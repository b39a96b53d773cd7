"""The public names of [`themisto_env.sandbox`][themisto_env.sandbox], a line each (``__init__.py`` imports each on
first use)."""

from .kernel.contract import KernelLike as KernelLike
from .kernel.core import Kernel as Kernel
from .kernel.launcher import KernelLauncher as KernelLauncher
from .kernel.spec import KernelSpec as KernelSpec
from .models import ExecutionResult as ExecutionResult
from .models import SandboxLimits as SandboxLimits
from .template.core import KernelTemplate as KernelTemplate
