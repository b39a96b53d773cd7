"""Where code runs: Jupyter kernels on interchangeable backends (``local``, ``bwrap``, ``docker``).

Owns the kernel (:class:`Kernel`, lazily re-exported: it imports jupyter_client), which drives a backend's
:class:`KernelLauncher` and speaks the Jupyter protocol; limits and results (``models``); Jupyter outputs
and their text (``outputs``, ``rendering``); snapshots, working folders, warm pools, the kernel image and
the in-kernel helper. The bottom layer: it imports no other part of themisto_env but the leaves (errors).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports
from themisto_env.sandbox.launcher import BACKENDS, KernelLauncher, launcher_class
from themisto_env.sandbox.models import ExecutionResult, SandboxLimits, SnapshotInfo

if TYPE_CHECKING:
    from themisto_env.sandbox.kernel import Kernel

__getattr__, __dir__ = lazy_exports(__name__, {"themisto_env.sandbox.kernel": ("Kernel",)})

__all__ = [
    "BACKENDS",
    "ExecutionResult",
    "Kernel",
    "KernelLauncher",
    "SandboxLimits",
    "SnapshotInfo",
    "launcher_class",
]
