"""Kernels brought to recorded states.

Owns building a dataset by replaying sessions in kernels (``build``: each session by ``session_replay``,
on threads or Ray actors by ``build_workers`` and ``build_ray``), serving a sample's state by
restoring a snapshot or replaying recorded cells (``state``, with ``state_check`` and ``recorded_cells``),
running model-written code in disposable copies (``disposable``), the kernel environments that pin the
packages a replay runs with (``kernel_environments`` and its ``kernel_environment_*`` parts), finding or
building a dataset (``resolve``) and opening one (``dataset``: :class:`~themisto_env.replay.dataset.Dataset`,
checked, cached per process, its samples listed without an env). Names are re-exported lazily: importing this
package starts and imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports

if TYPE_CHECKING:
    from themisto_env.replay.build import BuildReport, build_dataset
    from themisto_env.replay.dataset import Dataset
    from themisto_env.replay.disposable import CodeRun, DisposableKernels
    from themisto_env.replay.kernel_environment_registry import list_kernel_environments
    from themisto_env.replay.kernel_environment_spec import KernelEnvironmentRecord, KernelEnvironmentSpec
    from themisto_env.replay.kernel_environments import dataset_kernel_environment, use_kernel_environment
    from themisto_env.replay.resolve import bundled_dataset_dir, resolve_dataset
    from themisto_env.replay.state import TrajectoryKernel
    from themisto_env.replay.state_check import StateReport

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.replay.build": ("BuildReport", "build_dataset"),
        "themisto_env.replay.dataset": ("Dataset",),
        "themisto_env.replay.disposable": ("CodeRun", "DisposableKernels"),
        "themisto_env.replay.kernel_environment_registry": ("list_kernel_environments",),
        "themisto_env.replay.kernel_environment_spec": ("KernelEnvironmentRecord", "KernelEnvironmentSpec"),
        "themisto_env.replay.kernel_environments": ("dataset_kernel_environment", "use_kernel_environment"),
        "themisto_env.replay.resolve": ("bundled_dataset_dir", "resolve_dataset"),
        "themisto_env.replay.state": ("TrajectoryKernel",),
        "themisto_env.replay.state_check": ("StateReport",),
    },
)

__all__ = [
    "BuildReport",
    "CodeRun",
    "Dataset",
    "DisposableKernels",
    "KernelEnvironmentRecord",
    "KernelEnvironmentSpec",
    "StateReport",
    "TrajectoryKernel",
    "build_dataset",
    "bundled_dataset_dir",
    "dataset_kernel_environment",
    "list_kernel_environments",
    "resolve_dataset",
    "use_kernel_environment",
]
