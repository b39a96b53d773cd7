"""Kernel templates: kernels forked from a warm process, and copies of a state without a restore.

A [`KernelTemplate`][themisto_env.sandbox.KernelTemplate] is one process per kind of kernel (a `KernelSpec`)
with the imports done and no thread, zmq socket or event loop of its own (its program is
`themisto_env.sandbox.template.zygote`). A new kernel is forked from it and builds its own ipykernel
application after the fork, so it answers in milliseconds instead of a cold start's second.
`KernelTemplate.state` loads a snapshot once into a *state template*, and `KernelTemplate.copies` forks
kernels already in that state. An example, and what a copy shares on each backend: docs/sandboxes.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Unpack

from themisto_env.errors import (
    KernelStartError,
    TemplateGoneError,
)
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.copy_uid import CopyIdentity, can_give_identities, new_identity
from themisto_env.sandbox.kernel.forked import exited
from themisto_env.sandbox.kernel.launcher import KERNEL_ENVIRONMENT, launcher_class
from themisto_env.sandbox.kernel.process import SNAPSHOT_INBOX, SNAPSHOT_OUTBOX
from themisto_env.sandbox.kernel.spec import FORKING_BACKENDS, KernelFields, KernelSpec
from themisto_env.sandbox.lifetime import reaper as lifetime
from themisto_env.sandbox.lifetime import run_root as run_roots
from themisto_env.sandbox.lifetime.leftovers import remove_run_dir
from themisto_env.sandbox.lifetime.owners import RUN_DIR_PREFIX, write_owner
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.template.launchers import ISOLATED_COPIES, REQUEST_TIMEOUT_S, TEMPLATE_LAUNCHERS
from themisto_env.sandbox.template.prebuild import note_prebuild
from themisto_env.sandbox.template.spares import REFILL_DELAY_S, SpareKernels
from themisto_env.sandbox.template.states import NO_STATE_TEMPLATES, NO_STATE_TEMPLATES_ISOLATED, StateTemplates
from themisto_env.sandbox.template.zygote import HELPER_FILE, write_program

if TYPE_CHECKING:
    from themisto_env.sandbox.kernel.core import Kernel

__all__ = ["KernelTemplate"]


class KernelTemplate(StateTemplates, SpareKernels):
    """A warm process that kernels are forked from, on the ``local``, ``bwrap`` or ``docker`` backend.

    Args:
        spec: The kind of its kernels (a `KernelSpec`, or a backend's name): its backend is ``local``,
            ``bwrap`` or ``docker`` (a docker template forks kernels for model-written code only,
            ``store_access="copy"``, each taking a uid of its own); the template imports its ``preload``
            once (its kernels find them imported); its limits are the kernels' (``start_timeout_s`` bounds the
            template's own start too); ``store_access="copy"`` hides the store from the template and its
            kernels (snapshots are handed in); its ``environment``'s venv runs the template.
        reseed: Draw fresh random seeds in each copy (``random``, numpy's global generator) instead of
            keeping the state's own: copies then differ where the code draws random numbers.
        spares: Kernels to keep forked ahead of time, by this template and by each of its state templates.
        **fields: The spec's fields to set or replace (`KernelFields`: ``preload``, ``limits``,
            ``snapshot_dir``, ``store_access``, ``environment``, ...).
    """

    def __init__(
        self,
        spec: KernelSpec | str = "local",
        *,
        reseed: bool = False,
        spares: int = 1,
        **fields: Unpack[KernelFields],
    ) -> None:
        spec = self.spec = KernelSpec.of(spec, **fields)
        backend, store_access = spec.backend, spec.store_access
        if backend not in FORKING_BACKENDS:
            launcher_class(backend)  # an unknown name gets its one-line error with a suggestion
            raise KernelStartError(
                f"kernels of the {backend} backend are not forked: use {' or '.join(FORKING_BACKENDS)}"
            )
        if backend in ISOLATED_COPIES and store_access != "copy":
            raise KernelStartError(
                f"kernels of the {backend} backend are forked only for model-written code (store_access='copy')"
            )
        self.backend = backend
        self.preload = spec.preload
        self.limits = spec.limits
        self.store = SnapshotStore(spec.snapshot_dir)
        self.store_access = store_access
        self.environment = spec.environment
        self.reseed = reseed
        #: Kernels forked ahead of time and kept ready (a state template's too: copies of a state are
        #: usually asked for in groups)
        self.spares = spares
        #: How long after handing out a spare the next one starts forking (`REFILL_DELAY_S`)
        self.refill_delay_s = REFILL_DELAY_S
        self._spares: list[Kernel] = []
        self._fillers: list[threading.Thread] = []  # forking spares in the background (at most FILLERS)
        self._forking = 0  # spares being forked now
        self._waiting = 0  # callers waiting for one of them (see kernel())
        self._expected = 0  # copies announced ahead and not asked for yet (see expecting())
        self._asked = 0  # kernels asked for, ever (spares handed out included)
        self._keep_spares = True  # off once trimmed, until a kernel is asked for again
        self.digest: str | None = None  # a state template's snapshot
        #: The namespace fingerprint a kernel forked from this template starts with (copies are identical),
        #: taken from the first copy; None until then.
        self.fingerprint: dict[str, str] | None = None
        #: Why forking this template is unsafe (Python threads, open sockets or files, a CUDA context), as the
        #: template found at its start (a state template: after loading its snapshot); empty when safe.
        self.hazards: list[str] = []
        #: Why it could not build the kernel application before forking (its copies build their own, slower:
        #: warned as a `PrebuildWarning`), as it said at its start; None when built.
        self.prebuild_error: str | None = None
        self.socket_path: Path | None = None
        self._process: Any = None  # the template's launcher (a local, bwrap or docker one)
        #: The identities of the copies forked and not yet started (by connection file), where copies take one
        self._identities: dict[str, CopyIdentity] | None = {} if backend in ISOLATED_COPIES else None
        #: Whether its copies isolate themselves in namespaces of their own, with rlimits of their own (a
        #: ``bwrap`` template of model-written code: ``_isolate_copy`` in `themisto_env.sandbox.template.zygote`)
        self.isolates_copies = backend == "bwrap" and store_access == "copy"
        if backend in ISOLATED_COPIES:
            self.states_refused: str | None = NO_STATE_TEMPLATES
        elif self.isolates_copies:  # its copies isolate themselves after the fork
            self.states_refused = NO_STATE_TEMPLATES_ISOLATED
        else:
            self.states_refused = None
        self._pidfd: int | None = None  # a state template's (a child of the template, not of this process)
        self._run_dir: Path | None = None
        self._states: OrderedDict[str, KernelTemplate] = OrderedDict()
        self._retired: list[KernelTemplate] = []  # state templates out of the cache, kept while copies run
        self._forked: weakref.WeakSet[Kernel] = weakref.WeakSet()  # kernels forked from this template
        self._copies = 0  # how many were forked, ever
        self._claims = 0  # callers forking copies of this state template now (see claim())
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)  # a spare was added, or the template closed
        #: The template a state template was made from (None for a template itself).
        self.base: KernelTemplate | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def kernels_dir(self) -> Path:
        """Where the run directories of the kernels forked from this template (or its state templates) go."""
        return (self.base or self).run_dir / "kernels"

    @property
    def run_dir(self) -> Path:
        """The template's directory: its socket, its log, and its kernels' run directories (``kernels/``)."""
        if self._run_dir is None:
            raise TemplateGoneError("the kernel template is not started")
        return self._run_dir

    def start(self) -> Self:
        """Start the template process and wait until it answers. Returns ``self``.

        Raises:
            KernelStartError: It ended or did not answer in time, or the host refused what it needs (its
                folder, its socket: an ``OSError``, named in the message).
        """
        try:
            return self._start()
        except OSError as exc:  # the machinery's: one kind of start failure for the callers
            raise KernelStartError(f"the {self.backend} kernel template could not start: {exc}") from exc

    def _start(self) -> Self:
        with self._lock:
            if self._process is not None:
                return self
            if self._identities is not None and (refused := can_give_identities()) is not None:
                raise KernelStartError(f"the {self.backend} kernel template cannot isolate its copies: {refused}")
            self._run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX, dir=run_roots.run_root()))
            os.chmod(self._run_dir, 0o1777)
            (self._run_dir / "kernels").mkdir(mode=0o1777)
            os.chmod(self._run_dir / "kernels", 0o1777)
            self.socket_path = self._run_dir / "template.sock"
            write_owner(self._run_dir, self.backend)
            lifetime.track(self, self._run_dir)
            process = TEMPLATE_LAUNCHERS[self.backend](
                self.limits,
                shared_dirs=(self._run_dir,),
                readonly_dirs=(self.store.root,) if self.store_access == "read" else (),
                **({"environment": self.environment} if self.environment is not None else {}),
            )
            if self.store_access == "copy":
                process.hidden_dirs = (self.store.root,)
            write_program(self._run_dir)  # the program and the helper, whole, where every backend sees them
            process.config = {
                "socket": str(self.socket_path),
                "preload": list(self.preload),
                "helper": str(self._run_dir / HELPER_FILE),
                # one IPython directory for the template and its kernels: made once (by the template's probe)
                "environment": {**KERNEL_ENVIRONMENT, "IPYTHONDIR": str(self._run_dir / "ipython")},
            }
            self._process = process
            try:
                process.start(self._run_dir / "template.json", self._run_dir)
                write_owner(self._run_dir, self.backend, **process.owner_record())
                self._wait_ready()
            except BaseException:
                self.close()
                raise
            return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.limits.start_timeout_s + 30.0 * bool(self.preload)
        while True:
            if not self.is_alive():
                raise KernelStartError(
                    f"the {self.backend} kernel template ended while starting: {self._process.exit_reason()}"
                )
            try:
                answer = self.request({"op": "status"}, timeout_s=2.0)  # "ok": only a state template fails to load
                self.hazards = list(answer.get("hazards") or [])
                self.prebuild_error = note_prebuild(answer, f"the {self.backend} kernel template")
                return
            except TemplateGoneError:
                if time.monotonic() > deadline:
                    raise KernelStartError(f"the {self.backend} kernel template did not answer in time") from None
                time.sleep(0.02)

    def is_alive(self) -> bool:
        """Whether the template process runs."""
        if self._process is not None:
            return self._process.is_alive()
        return self._pidfd is not None and not exited(self._pidfd)

    def close(self) -> None:
        """End the template, its state templates and (as each watches its parent) the kernels forked from
        them; remove its directory. Idempotent."""
        with self._lock:
            spares, self._spares = self._spares, []
            self._expected = 0
            for spare in spares:
                spare.close(graceful=False)
            for state in [*self._states.values(), *self._retired]:
                state.close()
            self._states.clear()
            self._retired.clear()
            lifetime.untrack(self)
            if self._process is not None:
                self._process.stop(graceful=False)
                self._process = None
            if self._pidfd is not None:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                os.close(self._pidfd)
                self._pidfd = None
            if self._run_dir is not None:  # its kernels and what they started go first (a state template's: none)
                remove_run_dir(self._run_dir)
            self._run_dir = None
            self._ready.notify_all()  # callers waiting for a spare fork their own (and learn it is gone)
            fillers, self._fillers = self._fillers, []
        for filler in fillers:
            if filler is not threading.current_thread():
                filler.join(timeout=30)  # a fork under way fails now that the template is gone

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_process", None) is not None or getattr(self, "_pidfd", None) is not None:
            with contextlib.suppress(Exception):
                self.close()

    # -- requests -----------------------------------------------------------------------------------------------

    def request(self, request: dict[str, Any], *, timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """Send one request to the template; return its answer (a pidfd it sent is under ``"pidfd"``).

        Raises:
            TemplateGoneError: The template does not answer (it is gone, or not started).
        """
        if self.socket_path is None:
            raise TemplateGoneError("the kernel template is not started")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout_s)
            try:
                connection.connect(str(self.socket_path))
                connection.sendall((json.dumps(request) + "\n").encode())
                data, fds = b"", []
                while not data.endswith(b"\n"):
                    chunk, received, _, _ = socket.recv_fds(connection, 1 << 16, 1)
                    if not chunk:
                        break
                    data += chunk
                    fds += received
            except OSError as exc:
                raise TemplateGoneError(f"the kernel template does not answer: {exc}") from None
        if not data:
            for fd in fds:
                os.close(fd)
            raise TemplateGoneError("the kernel template closed the connection without an answer")
        answer: dict[str, Any] = json.loads(data)
        if fds:
            answer["pidfd"] = fds[0]
            for fd in fds[1:]:
                os.close(fd)
        return answer

    def kernel(self, *, limits: SandboxLimits | None = None) -> KernelLike:
        """A started kernel forked from this template (in this template's state: empty, or a snapshot's): a
        [`Kernel`][themisto_env.sandbox.Kernel] whose launcher forks instead of starting.

        A spare kernel forked ahead of time is handed out first (see ``spares`` and `expecting`): connected, its
        first ``kernel_info`` answered, checked alive, so handing it out asks no process anything; where none is
        ready but one is being forked for this caller, it waits for that one. Spares are then forked again in
        the background, `REFILL_DELAY_S` after a spare was handed out.
        """
        return self._spare_or_fork(limits)

    def fork(
        self,
        connection_file: Path,
        workdir: Path,
        log: Path,
        *,
        identity: CopyIdentity | None = None,
        limits: SandboxLimits | None = None,
    ) -> tuple[int, int]:
        """Fork a kernel on this connection file; return its pid (in the template's namespace) and a pidfd.
        Where copies take a uid of their own, a restart passes the copy's ``identity`` again: the files it
        made (its connection file, its log, its work) stay its own; a new copy's identity holds the kernel's
        own ``limits`` (default: the template's).

        Raises:
            TemplateGoneError: The template is gone.
            KernelStartError: The template cannot serve (a state template whose snapshot did not load).
        """
        request = {
            "op": "fork",
            "connection_file": str(connection_file),
            "workdir": str(workdir),
            "log": str(log),
            "environment": {"PYTHONUNBUFFERED": "1"},
            "reseed": self.reseed,
        }
        if self.isolates_copies and limits is not None:  # the copy's own rlimits (default: the template's)
            request["limits"] = {"nproc": limits.pids, "memory_bytes": limits.memory_mb << 20}
        identities = (self.base or self)._identities
        if identities is not None:  # the copy takes a uid of its own, its folders given to it first
            run_dir = connection_file.parent
            identity = identity or new_identity(limits or self.limits, run_dir)
            identity.give_folders(run_dir, workdir, (run_dir / SNAPSHOT_INBOX, run_dir / SNAPSHOT_OUTBOX))
            request["identity"] = identity.request()
            identities[str(connection_file)] = identity
        try:
            answer = self.request(request)
            if "pidfd" not in answer:
                raise KernelStartError(f"the kernel template could not fork a kernel: {answer.get('error')}")
        except BaseException:
            failed = identities.pop(str(connection_file), None) if identities is not None else None
            if failed is not None:  # a copy the template may have forked anyway goes with its uid
                failed.end_processes()
            raise
        return int(answer["pid"]), int(answer["pidfd"])

    def identity_for(self, connection_file: Path) -> CopyIdentity | None:
        """The identity the copy forked on ``connection_file`` took (None where copies take none)."""
        identities = (self.base or self)._identities
        return None if identities is None else identities.pop(str(connection_file), None)

    def limit_events(self) -> dict[str, int]:
        """The limit hits of the template's own process (a docker template's: its container's cgroup, which
        every copy shares); empty where it has none."""
        process = (self.base or self)._process
        return process.limit_events() if process is not None else {}
