"""Where code runs: Jupyter kernels on interchangeable backends (``local``, ``bwrap``, ``docker``).

Use :class:`Kernel`; it drives a backend's :class:`KernelLauncher` and speaks the Jupyter protocol.
"""

from __future__ import annotations

from themisto_env.sandbox.launcher import BACKENDS, KernelLauncher, launcher_class
from themisto_env.sandbox.models import ExecutionResult, SandboxLimits, SnapshotInfo

__all__ = [
    "BACKENDS",
    "ExecutionResult",
    "KernelLauncher",
    "SandboxLimits",
    "SnapshotInfo",
    "launcher_class",
]
