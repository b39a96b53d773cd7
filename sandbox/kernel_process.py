"""A kernel's process: its run directory, start, restart, interrupt, liveness and close.

:class:`KernelProcess` owns what a kernel is on the host: a private run directory and the backend's
:class:`~themisto_env.sandbox.launcher.KernelLauncher` that runs the process in it. The run directory
holds the connection file (``kernel.json``), the IPC sockets, the working folder (``work``), the owner
record (see :mod:`themisto_env.sandbox.lifetime`) and two snapshot boxes (:data:`SNAPSHOT_INBOX`,
:data:`SNAPSHOT_OUTBOX`).

It knows nothing of the Jupyter protocol: connecting to the started process and disconnecting from it
are the messaging side's (:class:`~themisto_env.sandbox.kernel_messaging.KernelMessaging`, through
:meth:`KernelProcess._connect` and :meth:`KernelProcess._disconnect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import jupyter_core.utils
from jupyter_client.connect import write_connection_file

from themisto_env.errors import InfrastructureError
from themisto_env.sandbox import lifetime
from themisto_env.sandbox.launcher import KernelLauncher
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.snapshots import SnapshotStore

#: Folders of the run directory: snapshots handed in to the kernel, and written out for the host to check.
SNAPSHOT_INBOX, SNAPSHOT_OUTBOX = "snapshots-in", "snapshots-out"
#: The kernel's working folder in its run directory (its current directory on every backend).
WORKDIR_NAME = "work"
#: The connection file in the run directory.
CONNECTION_FILE = "kernel.json"


_CLOSE_LOCKS_GUARD = threading.Lock()


def release_thread_loop() -> None:
    """Close the event loop jupyter_client made for the calling thread, unless it runs or the thread is the
    main one.

    jupyter_client's blocking calls (``run_sync``) make one loop per thread and never close it: an epoll
    descriptor and a socket pair held until garbage collection, for every thread that ever started or
    closed a kernel. Only that loop is closed (jupyter_core's own, never one the caller set); the next
    blocking call on the thread, if any, makes a new one.
    """
    if threading.current_thread() is threading.main_thread():
        return
    made = getattr(jupyter_core.utils, "_loop", None)  # jupyter_core's per-thread loop (a ContextVar)
    loop = made.get() if isinstance(made, contextvars.ContextVar) else None
    if not isinstance(loop, asyncio.AbstractEventLoop) or loop.is_running() or loop.is_closed():
        return
    made.set(None)
    with contextlib.suppress(RuntimeError):
        if asyncio.get_event_loop_policy().get_event_loop() is loop:
            asyncio.set_event_loop(None)
    loop.close()


_THREAD_LOOPS = threading.local()


def bind_thread_loop() -> None:
    """Give jupyter_client's blocking calls on this thread a loop of this thread's own.

    jupyter_core keeps "the thread's loop" in a context variable, and a context is copied into worker
    threads (anyio's ``to_thread``, as inspect_ai runs tools): two workers would then share the loop of
    the context they were copied from, and the second to run it fails ("This event loop is already
    running"). Called before blocking calls; a no-op once the thread's own loop is bound.
    """
    made = getattr(jupyter_core.utils, "_loop", None)
    if not isinstance(made, contextvars.ContextVar):
        return
    mine = getattr(_THREAD_LOOPS, "loop", None)
    if mine is not None and not mine.is_closed() and made.get() is mine:
        return
    if mine is None or mine.is_closed():
        mine = _THREAD_LOOPS.loop = asyncio.new_event_loop()
    made.set(mine)


def _close_lock(kernel: object) -> threading.Lock:
    """The kernel's close lock (made on first use: no ``__init__`` of this mixin runs)."""
    with _CLOSE_LOCKS_GUARD:
        lock = kernel.__dict__.get("_close_lock")
        if lock is None:
            lock = kernel.__dict__["_close_lock"] = threading.Lock()
        return lock


class KernelProcess:
    """The process side of :class:`~themisto_env.sandbox.kernel.Kernel` (which sets these attributes)."""

    backend: str
    environment: str | None
    limits: SandboxLimits
    store: SnapshotStore
    store_access: Literal["read", "copy"]
    restarts: int
    _launcher_cls: type[KernelLauncher]
    _launcher_options: dict[str, Any]
    _launcher: KernelLauncher | None
    _run_dir: Path | None
    _run_root: Path | None  # where the run directory goes (None: the temporary root)
    _connection: dict[str, Any] | None

    @property
    def isolated(self) -> bool:
        """Whether the backend isolates the kernel from the host."""
        return bool(self._launcher_cls.isolated)

    @property
    def run_dir(self) -> Path:
        """The kernel's private directory (connection file, sockets, working directory)."""
        if self._run_dir is None:
            raise InfrastructureError("the kernel is not started")
        return self._run_dir

    @property
    def launcher(self) -> KernelLauncher:
        """The backend's launcher that owns the kernel process."""
        if self._launcher is None:
            raise InfrastructureError("the kernel is not started")
        return self._launcher

    def start(self) -> Self:
        """Start the kernel and wait until it answers. Returns ``self``."""
        if self._launcher is not None:
            return self
        self._run_dir = Path(tempfile.mkdtemp(prefix=lifetime.RUN_DIR_PREFIX, dir=self._run_root))
        # A container's non-root user writes its sockets here; sticky, so it cannot replace the host's
        # files (owner.json, which the reaper trusts, or the connection file).
        os.chmod(self._run_dir, 0o1777)
        workdir = self._run_dir / WORKDIR_NAME
        workdir.mkdir()
        os.chmod(workdir, 0o777)
        connection_file = self._run_dir / CONNECTION_FILE
        _, self._connection = write_connection_file(
            str(connection_file), transport="ipc", ip=str(self._run_dir / "k"), key=uuid.uuid4().hex.encode()
        )
        os.chmod(connection_file, 0o644)
        lifetime.write_owner(self._run_dir, self.backend)  # before any process: a reaper can find it
        # a forked kernel's run directory is in its template's, which the template's reaper watches; the
        # kernel itself ends with its template (it watches its parent)
        lifetime.track(self, self._run_dir, reaper=self._run_root is None)
        for box in (SNAPSHOT_INBOX, SNAPSHOT_OUTBOX):
            (self._run_dir / box).mkdir()
            os.chmod(self._run_dir / box, 0o777)
        self._launcher = self._launcher_cls(
            self.limits,
            shared_dirs=(self._run_dir,),
            readonly_dirs=(self.store.root,) if self.store_access == "read" else (),
            **self._launcher_options,
        )
        if self.store_access == "copy":  # snapshots are handed in: the store is not the kernel's to see
            self._launcher.hidden_dirs = (self.store.root,)
        try:
            self._launch()
        except BaseException:
            self.close()
            raise
        return self

    def _launch(self) -> None:
        """Start the process, record it in the owner record, and connect to it."""
        self.launcher.start(self.run_dir / CONNECTION_FILE, self.run_dir / WORKDIR_NAME)
        self._record_owner()
        self._connect()

    def _connect(self) -> None:
        """Connect to the started process and wait until it answers (the messaging side's job).

        Raises:
            KernelStartError: It did not answer in time, or died meanwhile.
        """
        raise NotImplementedError("KernelMessaging connects to the kernel")

    def _disconnect(self) -> None:
        """Drop the connection to the process, if any (the messaging side's job)."""
        raise NotImplementedError("KernelMessaging disconnects from the kernel")

    def restart(self) -> None:
        """Kill the kernel process and start a fresh one (the user's state is gone)."""
        self._stop_process(graceful=False)
        self.restarts += 1
        self._launch()

    def close(self, *, graceful: bool = True) -> None:
        """Stop the kernel, remove its process or container and its run directory. Idempotent.

        Args:
            graceful: Ask the process to end first (SIGTERM); else kill it outright (a kernel about to
                be discarded, which may be busy with code that ignores signals).
        """
        with _close_lock(self):  # one close at a time: a discard thread and the exit hook may race
            lifetime.untrack(self)
            self._stop_process(graceful=graceful)
            self._launcher = None
            if self._run_dir is not None:
                shutil.rmtree(self._run_dir, ignore_errors=True)
                self._run_dir = None
        release_thread_loop()  # a worker thread's loop goes with its kernel (made again if needed)

    def _record_owner(self) -> None:
        """Name the kernel's host processes and containers in the run directory's owner record, so that
        they go with this process however it ends (see :mod:`themisto_env.sandbox.lifetime`)."""
        lifetime.write_owner(self.run_dir, self.backend, **self.launcher.owner_record())

    def _stop_process(self, *, graceful: bool) -> str:
        """Disconnect and stop the process; return the launcher's stop path (``not started`` if none)."""
        self._disconnect()
        return self._launcher.stop(graceful=graceful) if self._launcher is not None else "not started"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:  # last resort: never leave a process or container behind
        if getattr(self, "_launcher", None) is not None:
            with contextlib.suppress(Exception):
                self.close()

    def is_alive(self) -> bool:
        """Whether the kernel process is running."""
        return self._launcher is not None and self._launcher.is_alive()

    def interrupt(self) -> None:
        """Send an interrupt (SIGINT) to the kernel."""
        self.launcher.interrupt()
