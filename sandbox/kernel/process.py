"""A kernel's process: its run directory, start, restart, interrupt, liveness and close.

`KernelProcess` owns what a kernel is on the host: a private run directory and the backend's
[`KernelLauncher`][themisto_env.sandbox.KernelLauncher] that runs the process in it. The run directory
holds the connection file (``kernel.json``), the IPC sockets, the working folder (``work``), the owner
record (see `themisto_env.sandbox.lifetime.reaper`) and two snapshot boxes (`SNAPSHOT_INBOX`,
`SNAPSHOT_OUTBOX`).

It knows nothing of the Jupyter protocol: connecting to the started process and disconnecting from it
are the messaging part's (`KernelMessaging`, which holds
this part), and [`Kernel`][themisto_env.sandbox.Kernel] puts the two together.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Literal

from jupyter_client.connect import write_connection_file

from themisto_env.errors import InfrastructureError
from themisto_env.sandbox.compat.jupyter import thread_loop_variable
from themisto_env.sandbox.kernel.launcher import KernelLauncher
from themisto_env.sandbox.lifetime import run_root as run_roots
from themisto_env.sandbox.lifetime.leftovers import discard_run_dir
from themisto_env.sandbox.lifetime.owners import RUN_DIR_PREFIX, write_owner
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.snapshot_store import SnapshotStore

#: Folders of the run directory: snapshots handed in to the kernel, and written out for the host to check.
SNAPSHOT_INBOX, SNAPSHOT_OUTBOX = "snapshots-in", "snapshots-out"
#: The kernel's working folder in its run directory (its current directory on every backend).
WORKDIR_NAME = "work"
#: The connection file in the run directory.
CONNECTION_FILE = "kernel.json"


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
    made = thread_loop_variable()
    loop = made.get() if made is not None else None
    if made is None or not isinstance(loop, asyncio.AbstractEventLoop) or loop.is_running() or loop.is_closed():
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
    made = thread_loop_variable()
    if made is None:
        return
    mine = getattr(_THREAD_LOOPS, "loop", None)
    if mine is not None and not mine.is_closed() and made.get() is mine:
        return
    if mine is None or mine.is_closed():
        mine = _THREAD_LOOPS.loop = asyncio.new_event_loop()
    made.set(mine)


class KernelProcess:
    """A kernel's process: its run directory and the backend's launcher that runs the process in it.

    Args:
        backend: The backend's name (for the owner record and messages).
        launcher_cls: The backend's launcher class (a fork launcher for a kernel forked from a template).
        limits: The kernel's limits (the launcher applies them where it can).
        store: The snapshot store, mounted read-only with ``store_access="read"``, hidden with ``copy``.
        store_access: ``read`` or ``copy`` (see [`Kernel`][themisto_env.sandbox.Kernel]).
        launcher_options: Extra keyword arguments for the launcher.
        run_root: Where the run directory goes (None: the temporary root; a forked kernel's goes in its
            template's folder).
    """

    def __init__(
        self,
        backend: str,
        launcher_cls: type[KernelLauncher],
        *,
        limits: SandboxLimits,
        store: SnapshotStore,
        store_access: Literal["read", "copy"],
        launcher_options: dict[str, Any],
        run_root: Path | None = None,
    ) -> None:
        self.backend = backend
        self.launcher_cls = launcher_cls
        self.limits = limits
        self.store = store
        self.store_access = store_access
        self.launcher_options = dict(launcher_options)
        self.run_root = run_root
        #: How often the process was restarted.
        self.restarts = 0
        #: The connection info written into the connection file (set by `open`).
        self.connection: dict[str, Any] | None = None
        self._launcher: KernelLauncher | None = None
        self._run_dir: Path | None = None

    @property
    def isolated(self) -> bool:
        """Whether the backend isolates the kernel from the host."""
        return bool(self.launcher_cls.isolated)

    @property
    def started(self) -> bool:
        """Whether a launcher was made (by `open`) and not dropped by `close` since."""
        return self._launcher is not None

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

    def open(self) -> Path:
        """Make the run directory (connection file, owner record, working folder, snapshot boxes) and the
        launcher; start no process yet. Returns the run directory."""
        root = self.run_root if self.run_root is not None else run_roots.run_root()  # short enough for sockets
        run_dir = self._run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX, dir=root))
        # A container's non-root user writes its sockets here; sticky, so it cannot replace the host's
        # files (owner.json, which the reaper trusts, or the connection file).
        os.chmod(run_dir, 0o1777)
        workdir = run_dir / WORKDIR_NAME
        workdir.mkdir()
        os.chmod(workdir, 0o777)
        connection_file = run_dir / CONNECTION_FILE
        _, self.connection = write_connection_file(
            str(connection_file), transport="ipc", ip=str(run_dir / "k"), key=uuid.uuid4().hex.encode()
        )
        os.chmod(connection_file, 0o644)
        write_owner(run_dir, self.backend)  # before any process: a reaper can find it
        for box in (SNAPSHOT_INBOX, SNAPSHOT_OUTBOX):
            (run_dir / box).mkdir()
            os.chmod(run_dir / box, 0o777)
        self._launcher = self.launcher_cls(
            self.limits,
            shared_dirs=(run_dir,),
            readonly_dirs=(self.store.root,) if self.store_access == "read" else (),
            **self.launcher_options,
        )
        if self.store_access == "copy":  # snapshots are handed in: the store is not the kernel's to see
            self._launcher.hidden_dirs = (self.store.root,)
        return run_dir

    def launch(self) -> None:
        """Start the process and record it in the owner record (return at once: the messaging side waits
        until it answers)."""
        self.launcher.start(self.run_dir / CONNECTION_FILE, self.run_dir / WORKDIR_NAME)
        # name the kernel's host processes and containers in the owner record, so that they go with this
        # process however it ends (see `themisto_env.sandbox.lifetime.reaper`)
        write_owner(self.run_dir, self.backend, **self.launcher.owner_record())

    def stop(self, *, graceful: bool) -> str:
        """Stop the process; return the launcher's stop path (``not started`` if none)."""
        return self._launcher.stop(graceful=graceful) if self._launcher is not None else "not started"

    def relaunch(self) -> None:
        """Kill the process and start a fresh one (counted in `restarts`); the caller disconnected."""
        self.stop(graceful=False)
        self.restarts += 1
        self.launch()

    def close(self, *, graceful: bool = True) -> None:
        """Stop the process and remove the run directory (the caller disconnected). Idempotent."""
        self.stop(graceful=graceful)
        self._launcher = None
        if self._run_dir is not None:
            discard_run_dir(self._run_dir)
            self._run_dir = None

    def is_alive(self) -> bool:
        """Whether the kernel process is running."""
        return self._launcher is not None and self._launcher.is_alive()

    def interrupt(self) -> None:
        """Send an interrupt (SIGINT) to the kernel."""
        self.launcher.interrupt()
