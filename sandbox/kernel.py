"""A Jupyter kernel on any backend: start, execute, introspect, snapshot, restore, restart, close.

:class:`Kernel` is composed of one class per job, each in its own module:

- :class:`~themisto_env.sandbox.kernel_process.KernelProcess`: the run directory and the backend's
  :class:`~themisto_env.sandbox.launcher.KernelLauncher` (start, restart, interrupt, liveness, close);
- :class:`~themisto_env.sandbox.kernel_messaging.KernelMessaging`: the Jupyter messaging protocol
  (execute, replies, output collection, timeouts, helper calls; a kernel that dies while a reply is
  awaited raises :class:`~themisto_env.errors.KernelDiedError` within a second instead of hanging);
- :class:`~themisto_env.sandbox.kernel_snapshots.KernelSnapshots`: snapshot and restore through the
  content-addressed store;
- :class:`~themisto_env.sandbox.kernel_introspection.KernelIntrospection`: typed helper calls (variables,
  memory, fingerprints) and the working folder's files.

Example:
    >>> with Kernel("local") as kernel:
    ...     kernel.execute("x = 41 + 1").status
    ...     kernel.inspect_variable("x").repr
    'ok'
    '42'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from themisto_env.sandbox.kernel_introspection import KernelIntrospection
from themisto_env.sandbox.kernel_snapshots import KernelSnapshots
from themisto_env.sandbox.launcher import launcher_class
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.snapshots import SnapshotStore
from themisto_env.sandbox.template_launcher import ForkSource, fork_launcher_class

__all__ = ["Kernel"]


class Kernel(KernelIntrospection, KernelSnapshots):
    """A Jupyter kernel on a named backend.

    Args:
        backend: ``local`` (default, not isolated), ``bwrap`` or ``docker``.
        limits: Per-execution and per-kernel limits.
        snapshot_dir: Where snapshots are stored (content-addressed); defaults to the user cache.
        store_access: How the kernel sees the snapshot store. ``read``: mounted read-only (the kernel
            can read every snapshot); ``copy``: not mounted at all, each snapshot to restore is copied
            into the kernel's run directory and removed once loaded (for kernels that run
            model-written code, which must not read the states of later steps). Either way a kernel
            never writes the store: :meth:`snapshot` writes into the run directory and the host checks
            the file's hash before moving it into the store.
        launcher_options: Extra keyword arguments for the backend's launcher (e.g. ``image`` for docker).
        environment: A kernel environment's id (``themisto kernel-env create``): the kernel runs its venv's
            Python (local, bwrap) or its image (docker); None runs the tool's own Python (or the default
            image). Snapshots record the environment that wrote them, and a kernel restores only those
            of its own environment.
        template: A :class:`~themisto_env.sandbox.template.KernelTemplate` to fork the kernel from instead of
            starting one (usually through :meth:`KernelTemplate.kernel` or :meth:`KernelTemplate.copies`).
    """

    def __init__(
        self,
        backend: str = "local",
        *,
        limits: SandboxLimits | None = None,
        snapshot_dir: str | Path | None = None,
        store_access: Literal["read", "copy"] = "read",
        launcher_options: dict[str, Any] | None = None,
        environment: str | None = None,
        template: ForkSource | None = None,
    ) -> None:
        self.backend = backend
        self.environment = environment
        self.limits = limits or SandboxLimits()
        self.store = SnapshotStore(snapshot_dir)
        self.store_access = store_access
        self._launcher_cls = launcher_class(backend) if template is None else fork_launcher_class(backend)
        self._launcher_options = dict(launcher_options or {})
        if environment is not None:
            self._launcher_options["environment"] = environment
        if template is not None:  # forked from a template's process instead of started
            self._launcher_options["template"] = template
        self._launcher = None
        self._client = None
        self._run_dir = None
        self._connection = None
        self._run_root = None if template is None else template.kernels_dir
        self._scan_cache = {}  # digests of the working folder's files, by size and times
        self.restarts = 0
