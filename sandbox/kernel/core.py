"""A Jupyter kernel on any backend: start, execute, restart, close; its snapshots and introspection as parts.

[`Kernel`][themisto_env.sandbox.Kernel] holds one part per job, each a plain class in its own module:
`KernelProcess` (the run directory and the launcher), `KernelMessaging` (the Jupyter messaging protocol),
`KernelSnapshots` (``kernel.snapshots``) and `KernelIntrospection` (``kernel.introspect``), reached directly
rather than re-exposed. A kernel forked from a template is the same class with another launcher.

Example:
    >>> with Kernel("local") as kernel:
    ...     kernel.execute("x = 41 + 1").status
    ...     kernel.introspect.inspect_variable("x").repr
    'ok'
    '42'
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, Unpack

import zmq

from themisto_env import tracing
from themisto_env.errors import KernelStartError
from themisto_env.sandbox.kernel.forked import ForkSource, fork_launcher_class
from themisto_env.sandbox.kernel.introspection import KernelIntrospection
from themisto_env.sandbox.kernel.launcher import KernelLauncher, launcher_class
from themisto_env.sandbox.kernel.messaging import KernelMessaging
from themisto_env.sandbox.kernel.process import KernelProcess, release_thread_loop
from themisto_env.sandbox.kernel.snapshots import KernelSnapshots
from themisto_env.sandbox.kernel.spec import KernelFields, KernelSpec
from themisto_env.sandbox.lifetime import reaper as lifetime
from themisto_env.sandbox.models import ExecutionResult, SandboxLimits
from themisto_env.sandbox.store.snapshot_store import SnapshotStore

__all__ = ["Kernel"]


class Kernel:
    """A Jupyter kernel on a named backend.

    Args:
        spec: What kind of kernel (a `KernelSpec`), or the backend's name: ``local`` (default, not
            isolated), ``bwrap`` or ``docker``. Its ``fork`` is its makers' business (the state server):
            a `Kernel` is started or forked as told.
        template: A [`KernelTemplate`][themisto_env.sandbox.KernelTemplate] to fork the kernel from instead of
            starting one (usually through [`KernelTemplate.kernel`][themisto_env.sandbox.KernelTemplate.kernel] or
            `KernelTemplate.copies`).
        **fields: The spec's fields to set or replace (`KernelFields`): ``limits``, ``snapshot_dir``,
            ``store_access`` (``read``: the store mounted read-only; ``copy``: not mounted, each snapshot to
            restore copied into the run directory; either way a kernel never writes the store: `snapshots.save()`
            writes into the run directory and the host checks the file's hash before moving it into the
            store), ``environment`` (a kernel environment's id: its venv's Python or its image; the store
            restores only snapshots written in it), ``launcher_options`` (e.g. ``image`` for docker), ...

    Its lifetime methods drive the process and messaging parts; what they raise, and when, is said on the
    part's method.
    """

    def __init__(
        self,
        spec: KernelSpec | str = "local",
        *,
        template: ForkSource | None = None,
        **fields: Unpack[KernelFields],
    ) -> None:
        spec = self.spec = KernelSpec.of(spec, **fields)
        options = spec.options
        if spec.environment is not None:
            options["environment"] = spec.environment
        if template is not None:  # forked from a template's process instead of started
            options["template"] = template
        self._process = KernelProcess(
            spec.backend,
            launcher_class(spec.backend) if template is None else fork_launcher_class(spec.backend),
            limits=spec.limits,
            store=SnapshotStore(spec.snapshot_dir),
            store_access=spec.store_access,
            launcher_options=options,
            run_root=None if template is None else template.kernels_dir,
        )
        self._messaging = KernelMessaging(self._process)
        self._snapshots = KernelSnapshots(self._messaging, spec.environment)
        self._introspection = KernelIntrospection(self._messaging)
        self._close_lock = threading.Lock()  # one close at a time: a discard thread and the exit hook may race

    # -- what the kernel is (fixed when it is made) ----------------------------------------------------------

    @property
    def backend(self) -> str:
        """The backend that runs the kernel (``local``, ``bwrap``, ``docker``)."""
        return self._process.backend

    @property
    def environment(self) -> str | None:
        """The kernel environment's id (None: the tool's own Python, or the default image)."""
        return self._snapshots.environment

    @property
    def limits(self) -> SandboxLimits:
        """The kernel's limits."""
        return self._process.limits

    @property
    def store(self) -> SnapshotStore:
        """The snapshot store its snapshots go to and are restored from."""
        return self._process.store

    @property
    def store_access(self) -> Literal["read", "copy"]:
        """How the kernel sees the snapshot store (see the class's arguments)."""
        return self._process.store_access

    # -- the process ---------------------------------------------------------------------------------------

    @property
    def restarts(self) -> int:
        """How often the kernel process was restarted (by [`restart`][themisto_env.sandbox.Kernel.restart], or after a
        wedged cell)."""
        return self._process.restarts

    @property
    def isolated(self) -> bool:
        """Whether the backend isolates the kernel from the host."""
        return self._process.isolated

    @property
    def run_dir(self) -> Path:
        """The kernel's private directory (connection file, sockets, working directory)."""
        return self._process.run_dir

    @property
    def launcher(self) -> KernelLauncher:
        """The backend's launcher that owns the kernel process."""
        return self._process.launcher

    def start(self) -> Self:
        """Start the kernel and wait until it answers (a no-op once started). Returns ``self``.

        Raises:
            KernelStartError: It did not answer in time, died meanwhile, the helper could not be installed, or
                the host refused what a start needs (its run directory, its IPC sockets: an ``OSError`` or a
                ``ZMQError``, named in the message).

        See `open`.
        """
        if self._process.started:
            return self
        forked = self._process.run_root is not None
        with tracing.span(
            "themisto.kernel.start", {"themisto.kernel.backend": self.backend, "themisto.kernel.forked": forked}
        ):
            try:
                run_dir = self._process.open()
                # a forked kernel's run directory is in its template's, which the template's reaper watches; the
                # kernel itself ends with its template (it watches its parent)
                lifetime.track(self, run_dir, reaper=self._process.run_root is None)
                self._process.launch()
                self._messaging.connect()
            except (OSError, zmq.ZMQError) as exc:  # the machinery's, never the caller's: one kind of start failure
                self.close()
                raise KernelStartError(
                    f"the {self.backend} kernel could not start: {type(exc).__name__}: {exc}"
                ) from exc
            except BaseException:
                self.close()
                raise
        return self

    def close(self, *, graceful: bool = True) -> None:
        """Stop the kernel, remove its process or container and its run directory. Idempotent.

        Args:
            graceful: Ask the process to end first (SIGTERM); else kill it outright (a kernel about to
                be discarded, which may be busy with code that ignores signals).

        See `disconnect`.
        """
        with self._close_lock:
            lifetime.untrack(self)
            self._messaging.disconnect()
            self._process.close(graceful=graceful)
        release_thread_loop()  # a worker thread's loop goes with its kernel (made again if needed)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:  # last resort: never leave a process or container behind
        process = getattr(self, "_process", None)  # None on a kernel whose __init__ failed
        if process is not None and process.started:
            with contextlib.suppress(Exception):
                self.close()

    def is_alive(self) -> bool:
        """Whether the kernel process is running.

        See `is_alive`.
        """
        return self._process.is_alive()

    def interrupt(self) -> None:
        """Send an interrupt (SIGINT) to the kernel.

        See `interrupt`.
        """
        self._process.interrupt()

    def restart(self) -> None:
        """Kill the kernel process and start a fresh one (the user's state is gone).

        See `restart`.
        """
        self._messaging.restart()

    # -- execution -----------------------------------------------------------------------------------------

    def execute(
        self, code: str, *, timeout_s: float | None = None, fingerprint: bool = False, interrupt: bool = True
    ) -> ExecutionResult:
        """Run a cell as a user would (stored in history, counted) and return what it produced; see
        `KernelMessaging.execute`.

        Raises:
            KernelDiedError: The kernel process died while running the cell.
        """
        return self._messaging.execute(code, timeout_s=timeout_s, fingerprint=fingerprint, interrupt=interrupt)

    def call(self, function: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Run a function of the in-kernel helper without touching the user's state; return its value (see
        `KernelMessaging.call`)."""
        return self._messaging.call(function, timeout_s=timeout_s, **kwargs)

    # -- the parts: snapshots and introspection ------------------------------------------------------------

    @property
    def snapshots(self) -> KernelSnapshots:
        """The kernel's snapshots and working folder: `save`, `restore`, `workdir`, `files`, `set_files` (see
        `KernelSnapshots`)."""
        return self._snapshots

    @property
    def introspect(self) -> KernelIntrospection:
        """The read-only questions about the kernel's state: `list_variables`, `inspect_variable`, `dataframe`,
        `memory`, `fingerprint`, ... (see `KernelIntrospection`)."""
        return self._introspection
