"""A Jupyter kernel on any backend: start, execute, introspect, snapshot, restore, restart, close.

:class:`Kernel` speaks the Jupyter messaging protocol (jupyter_client over IPC sockets in a private run
directory) and drives a backend's :class:`~themisto_env.sandbox.launcher.KernelLauncher` for the
process. While it waits for a reply it checks that the process is alive, so a kernel that dies (a
segfault, ``os._exit``, the OOM killer, a removed container) raises :class:`KernelDiedError` within a
second instead of hanging.

Example:
    >>> with Kernel("local") as kernel:
    ...     kernel.execute("x = 41 + 1").status
    ...     kernel.inspect_variable("x").repr
    'ok'
    '42'
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import queue
import shutil
import stat
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from themisto_env.errors import (
    DataError,
    HelperError,
    InfrastructureError,
    IntrospectionRefused,
    KernelDiedError,
    KernelStartError,
    KernelTimeoutError,
    SnapshotCorruptError,
    SnapshotEnvironmentError,
    SnapshotError,
    UnknownNameError,
)
from themisto_env.sandbox import lifetime
from themisto_env.sandbox.environments import environment_label
from themisto_env.sandbox.introspection import (
    FrameView,
    FrameViewName,
    MemoryReport,
    NamespaceState,
    SourceText,
    VariableDetail,
    VariableListing,
)
from themisto_env.sandbox.launcher import KernelLauncher, launcher_class
from themisto_env.sandbox.models import ExecutionResult, RestoreResult, SandboxLimits, SnapshotInfo
from themisto_env.sandbox.outputs import OutputCollector
from themisto_env.sandbox.snapshots import SnapshotStore
from themisto_env.sandbox.workdir import FileStore, FileTree, FolderTooLargeError, ScanCache, scan, sync

_POLL_S = 0.25  # how often a silent wait checks that the kernel is alive
_HELPER_MODULE = "_themisto_helper"
#: Bounds of a measurement after model-written code ran (its answer may be forged).
MEASURE_TIMEOUT_S, MEASURE_MAX_NAMES, MEASURE_MAX_ENTRY = 10.0, 100_000, 10_000
_INBOX, _OUTBOX = "snapshots-in", "snapshots-out"  # in the run directory: snapshots handed in, written out


def _helper_expression(function: str, kwargs: dict[str, Any]) -> str:
    """The user expression that calls a helper function (see :func:`kernel_helper.call`)."""
    return f"__import__('sys').modules[{_HELPER_MODULE!r}].call({function!r}, {json.dumps(kwargs)!r})"


def _helper_value(function: str, value: dict[str, Any]) -> Any:
    """The value of a helper call from its user-expression result.

    Raises:
        UnknownNameError: The helper was asked about a name the user did not define.
        IntrospectionRefused: The helper declined (the variable is not of the kind asked for).
        HelperError: The helper function raised on the user's data.
        InfrastructureError: The expression itself failed (the helper is missing or broken).
    """
    if value.get("status") != "ok":
        raise InfrastructureError(f"kernel helper {function!r} failed: {value.get('ename')}: {value.get('evalue')}")
    payload = json.loads(ast.literal_eval(value["data"]["text/plain"]))
    if "refused" in payload:
        refused = payload["refused"]
        if refused.get("suggestions") is not None:
            raise UnknownNameError(
                function, refused["detail"], name=refused.get("name"), suggestions=tuple(refused["suggestions"])
            )
        raise IntrospectionRefused(function, refused["detail"], name=refused.get("name"))
    if "raised" in payload:
        raise HelperError(function, payload["raised"])
    return payload["ok"]


def _fingerprint_value(value: dict[str, Any] | None) -> dict[str, str] | None:
    """A fingerprint that rode on an execute request, or None where it could not be taken (the caller
    then asks for it on its own, where a failure is reported properly)."""
    if not value:
        return None
    try:
        return dict(_helper_value("namespace_fingerprint", value))
    except (HelperError, InfrastructureError):
        return None


def _helper_source() -> str:
    return resources.files("themisto_env.sandbox").joinpath("kernel_helper.py").read_text()


class Kernel:
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
        environment: A kernel environment's id (``themisto env create``): the kernel runs its venv's
            Python (local, bwrap) or its image (docker); None runs the tool's own Python (or the default
            image). Snapshots record the environment that wrote them, and a kernel restores only those
            of its own environment.
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
    ) -> None:
        self.backend = backend
        self.environment = environment
        self.limits = limits or SandboxLimits()
        self.store = SnapshotStore(snapshot_dir)
        self.store_access = store_access
        self._launcher_cls = launcher_class(backend)
        self._launcher_options = dict(launcher_options or {})
        if environment is not None:
            self._launcher_options["environment"] = environment
        self._launcher: KernelLauncher | None = None
        self._client: BlockingKernelClient | None = None
        self._run_dir: Path | None = None
        self._connection: dict[str, Any] | None = None
        self._scan_cache: ScanCache = {}  # digests of the working folder's files, by size and times
        self.restarts = 0

    # -- lifecycle -----------------------------------------------------------------------------------

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
    def workdir(self) -> Path:
        """The kernel's working folder (``RUN_DIR/work``, its current directory on every backend): a private
        copy of the files its cells read by relative path (see :meth:`set_files`). What cells write there
        stays there, survives a restart (as on a person's disk) and goes with the kernel."""
        return self.run_dir / "work"

    def files(self) -> FileTree:
        """The working folder's files: relative path -> sha256 (see :mod:`themisto_env.sandbox.workdir`).

        Raises:
            FolderTooLargeError: They hold more than ``limits.workdir_mb``.
            InfrastructureError: The folder could not be read (a file the kernel made unreadable, ...).
        """
        try:
            return scan(self.workdir, limit_bytes=int(self.limits.workdir_mb * 2**20), cache=self._scan_cache)
        except FolderTooLargeError:
            raise
        except DataError as exc:
            raise InfrastructureError(f"could not read the kernel's working folder: {exc}") from exc

    def set_files(self, tree: FileTree, store: FileStore) -> None:
        """Make the working folder hold exactly ``tree``'s files, taken from ``store`` (each checked
        against its digest); only what differs is touched. The kernel should be idle.

        Raises:
            DataError: A file is missing from the store or does not match its digest.
            InfrastructureError: The folder could not be changed (what the kernel wrote there is not the
                host's to remove, ...): a fresh kernel has a folder of its own.
        """
        try:
            sync(self.workdir, tree, store, cache=self._scan_cache)
        except OSError as exc:
            raise InfrastructureError(f"could not set the kernel's working folder: {exc}") from exc

    @property
    def launcher(self) -> KernelLauncher:
        """The backend's launcher that owns the kernel process."""
        if self._launcher is None:
            raise InfrastructureError("the kernel is not started")
        return self._launcher

    def start(self) -> Kernel:
        """Start the kernel and wait until it answers. Returns ``self``."""
        if self._launcher is not None:
            return self
        self._run_dir = Path(tempfile.mkdtemp(prefix="themisto-kernel-"))
        # A container's non-root user writes its sockets here; sticky, so it cannot replace the host's
        # files (owner.json, which the reaper trusts, or the connection file).
        os.chmod(self._run_dir, 0o1777)
        workdir = self._run_dir / "work"
        workdir.mkdir()
        os.chmod(workdir, 0o777)
        connection_file = self._run_dir / "kernel.json"
        _, self._connection = write_connection_file(
            str(connection_file), transport="ipc", ip=str(self._run_dir / "k"), key=uuid.uuid4().hex.encode()
        )
        os.chmod(connection_file, 0o644)
        lifetime.write_owner(self._run_dir, self.backend)  # before any process: a reaper can find it
        lifetime.track(self, self._run_dir)
        for box in (_INBOX, _OUTBOX):  # snapshots handed in, and written out for the host to check
            (self._run_dir / box).mkdir()
            os.chmod(self._run_dir / box, 0o777)
        self._launcher = self._launcher_cls(
            self.limits,
            shared_dirs=(self._run_dir,),
            readonly_dirs=(self.store.root,) if self.store_access == "read" else (),
            **self._launcher_options,
        )
        try:
            self._boot()
        except BaseException:
            self.close()
            raise
        return self

    def _boot(self) -> None:
        launcher = self.launcher
        launcher.start(self.run_dir / "kernel.json", self.run_dir / "work")
        self._record_owner()
        client = BlockingKernelClient()
        client.load_connection_info(self._connection or {})
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        self._client = client
        deadline = time.monotonic() + self.limits.start_timeout_s
        while True:  # ready = a kernel_info reply on shell AND its status on iopub (no slow joiner)
            msg_id = client.kernel_info()
            try:
                self._wait_shell_reply(msg_id, deadline=time.monotonic() + 1.0, during="start")
                if self._seen_on_iopub(msg_id, deadline=time.monotonic() + 1.0):
                    break
                raise _Silent
            except _Silent:
                if time.monotonic() > deadline:
                    raise KernelStartError(
                        f"the {self.backend} kernel did not answer within {self.limits.start_timeout_s:g} s"
                    ) from None
            except KernelDiedError as exc:
                raise KernelStartError(str(exc)) from exc
        self._drain_iopub()
        source = _helper_source()
        module = (
            f"__import__('sys').modules.setdefault({_HELPER_MODULE!r}, "
            f"__import__('types').ModuleType({_HELPER_MODULE!r}))"
        )
        code = (
            f"exec(compile({source!r}, '<themisto-helper>', 'exec'), {module}.__dict__)\n"
            f"{module}.SOURCE = {source!r}"  # seal() compiles private copies from it
        )
        result = self._run(code, silent=True, store_history=False, timeout_s=self.limits.start_timeout_s)
        if result[0].get("status") != "ok":
            raise KernelStartError(f"could not install the introspection helper: {result[0]}")
        try:
            self.call("install", timeout_s=self.limits.start_timeout_s)  # outside a cell, by design
        except (HelperError, InfrastructureError) as exc:
            raise KernelStartError(f"could not install the introspection helper: {exc}") from exc

    def restart(self) -> None:
        """Kill the kernel process and start a fresh one (the user's state is gone)."""
        self._stop_process(graceful=False)
        self.restarts += 1
        self._boot()

    def close(self, *, graceful: bool = True) -> None:
        """Stop the kernel, remove its process or container and its run directory. Idempotent.

        Args:
            graceful: Ask the process to end first (SIGTERM); else kill it outright (a kernel about to
                be discarded, which may be busy with code that ignores signals).
        """
        lifetime.untrack(self)
        self._stop_process(graceful=graceful)
        self._launcher = None
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    def _record_owner(self) -> None:
        """Name the kernel's host processes and containers in the run directory's owner record, so that
        they go with this process however it ends (see :mod:`themisto_env.sandbox.lifetime`)."""
        lifetime.write_owner(self.run_dir, self.backend, **self.launcher.owner_record())

    def _stop_process(self, *, graceful: bool) -> str:
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        return self._launcher.stop(graceful=graceful) if self._launcher is not None else "not started"

    def __enter__(self) -> Kernel:
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

    def memory_bytes(self) -> int | None:
        """Resident memory of the kernel process."""
        memory = self.launcher.memory_bytes()
        return memory if memory is not None else self.call("kernel_memory")

    # -- execution -------------------------------------------------------------------------------------

    def execute(
        self, code: str, *, timeout_s: float | None = None, fingerprint: bool = False, interrupt: bool = True
    ) -> ExecutionResult:
        """Run a cell as a user would (stored in history, counted) and return what it produced.

        A cell that runs past the timeout is interrupted (status ``timeout``); if the kernel does not
        come back within the grace period it is restarted (``kernel_restarted``; the state is gone).
        Without ``interrupt`` (a kernel about to be discarded) the wait simply ends at the timeout,
        with status ``timeout``, and the kernel is left busy.
        With ``fingerprint``, the namespace fingerprint after a cell that did not raise comes back in the
        same request (``result.fingerprint``).

        Raises:
            KernelDiedError: The kernel process died while running the cell.
        """
        started = time.perf_counter()
        expressions = {"fp": _helper_expression("namespace_fingerprint", {})} if fingerprint else None
        reply, outputs, timed_out, restarted, truncated = self._run(
            code,
            silent=False,
            store_history=True,
            timeout_s=timeout_s,
            user_expressions=expressions,
            interrupt=interrupt,
        )
        duration = time.perf_counter() - started
        status = "timeout" if timed_out else ("error" if reply.get("status") == "error" else "ok")
        after = reply.get("user_expressions", {}).get("fp") if fingerprint and status == "ok" else None
        return ExecutionResult(
            status=status,
            outputs=outputs,
            execution_count=reply.get("execution_count"),
            duration_s=duration,
            memory_bytes=None if restarted else self.launcher.memory_bytes(),
            truncated=truncated,
            kernel_restarted=restarted,
            fingerprint=_fingerprint_value(after),
        )

    def call(self, function: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Run a function of the in-kernel helper without touching the user's state; return its value.

        The call is a silent execution with the work done in ``user_expressions``: it changes neither the
        user namespace, nor ``_``/``Out``, nor the execution counter or history.

        This is the low-level escape hatch: the typed methods (:meth:`list_variables`,
        :meth:`inspect_variable`, ...) call it and return models.

        Raises:
            UnknownNameError: The function was asked about a name the user did not define.
            IntrospectionRefused: The function declined (the variable is not of the kind asked for).
            HelperError: The function raised on the user's data, or ran past the time limit and was
                interrupted (the kernel is fine).
            KernelTimeoutError: It ran past the limit and the kernel had to be restarted (the state is gone).
            InfrastructureError: The helper could not be reached or run (the kernel is not fine).
        """
        expression = _helper_expression(function, kwargs)
        reply, _, timed_out, restarted, _ = self._run(
            "", silent=True, store_history=False, timeout_s=timeout_s, user_expressions={"r": expression}
        )
        if restarted:
            raise KernelTimeoutError(
                f"kernel helper {function!r} ran past the time limit and the {self.backend} kernel had to be "
                "restarted (its state is gone)"
            )
        value = reply.get("user_expressions", {}).get("r", {})
        if timed_out and value.get("status") != "ok":
            limit = timeout_s or self.limits.timeout_s
            raise HelperError(function, f"TimeoutError: it ran past {limit:g} s and was interrupted")
        return _helper_value(function, value)

    # -- introspection: none of it changes the user namespace, ``_``, ``Out``, the counter or the history ----

    def list_variables(self, *, limit: int = 100, known: Mapping[str, int] | None = None) -> VariableListing:
        """The user's variables sorted by name, with type, size, and shape or length (modules left out).

        Args:
            limit: The most rows to return (``total`` counts them all).
            known: Sizes to report as they are instead of measuring them (the recorded ones a tool shows
                anyway: measuring deep sizes is most of the call's cost).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer (it died, or stopped answering).
        """
        extra = {"known": dict(known)} if known else {}
        return VariableListing.model_validate(self.call("list_variables", limit=limit, **extra))

    def inspect_variable(self, name: str, *, max_chars: int = 2000) -> VariableDetail:
        """One variable: type, shape, length, size, dtype(s) and its repr cut to ``max_chars``.

        A ``__repr__`` that raises is answered in :attr:`VariableDetail.repr` (``<repr failed: ...>``).

        Raises:
            UnknownNameError: No user variable is called ``name`` (the message names the nearest ones).
            HelperError: The helper failed on the user's object (a ``__len__`` that raises, ...; the kernel
                is fine).
            InfrastructureError: The kernel could not answer.
        """
        return VariableDetail.model_validate(self.call("inspect_variable", name=name, max_chars=max_chars))

    def dataframe(self, name: str, view: FrameViewName = "head", *, n: int = 5, max_chars: int = 4000) -> FrameView:
        """``head(n)``, ``info()`` or ``describe()`` of a pandas DataFrame or Series, as text.

        Args:
            name: The variable's name.
            view: Which view.
            n: How many rows ``head`` shows (1 to 50).
            max_chars: The longest text returned (a marker says how much was cut).

        Raises:
            UnknownNameError: No user variable is called ``name``.
            IntrospectionRefused: ``name`` is not a DataFrame or Series, or ``view`` is not a view.
            HelperError: pandas raised on the user's frame (``describe()`` of a frame without columns,
                ...; the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return FrameView.model_validate(self.call("dataframe", name=name, view=view, n=n, max_chars=max_chars))

    def memory(self, *, top: int = 20, known: Mapping[str, int] | None = None) -> MemoryReport:
        """The kernel's resident memory, the user variables' total size and the ``top`` largest ones
        (the sizes in ``known`` reported as they are, not measured).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        extra = {"known": dict(known)} if known else {}
        return MemoryReport.model_validate(self.call("memory", top=top, **extra))

    def variable_sizes(self) -> dict[str, int]:
        """Approximate deep size in bytes of every user variable (modules left out).

        Raises:
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return {str(name): int(size) for name, size in self.call("variable_sizes").items()}

    def source(self, name: str, *, max_chars: int = 4000) -> SourceText:
        """The source of a function or class (of a bound method's function; of another object's class).

        Raises:
            UnknownNameError: No user variable is called ``name``.
            IntrospectionRefused: Python has no source for it (a class defined in a cell, a builtin, a
                kernel restored from a snapshot, ...).
            HelperError: The helper failed on the user's object (the kernel is fine).
            InfrastructureError: The kernel could not answer.
        """
        return SourceText.model_validate(self.call("source", name=name, max_chars=max_chars))

    def namespace_state(self) -> NamespaceState:
        """What introspection must never change: user names with object ids and types, ``_``, ``Out``'s
        keys, the execution counter and the history's length (comparable within one kernel process).

        Raises:
            HelperError: The helper failed on the user's data (``Out`` rebound to a non-dict, ...).
            InfrastructureError: The kernel could not answer.
        """
        return NamespaceState.model_validate(self.call("state_fingerprint"))

    def fingerprint(self) -> dict[str, str]:
        """The user namespace's fingerprint: per name ``type|shape-or-length|content-hash`` (the hash
        where cheap). Equal in two kernels in the same state, in any process; see
        :func:`themisto_env.sandbox.kernel_helper.namespace_fingerprint`.

        Raises:
            InfrastructureError: The kernel could not answer.
        """
        try:
            return dict(self.call("namespace_fingerprint"))
        except HelperError as exc:  # the helper guards every value: this is a bug, not user data
            raise InfrastructureError(str(exc)) from exc

    def package_versions(self, names: Sequence[str]) -> dict[str, str]:
        """The versions of these distributions installed where the kernel runs (``absent`` if not)."""
        try:
            return dict(self.call("package_versions", names=list(names)))
        except HelperError as exc:
            raise InfrastructureError(str(exc)) from exc

    def loaded_distributions(self) -> dict[str, str]:
        """Installed distributions (name: version) whose modules the kernel has imported so far."""
        try:
            return dict(self.call("loaded_distributions"))
        except HelperError as exc:
            raise InfrastructureError(str(exc)) from exc

    def preload(self, modules: Sequence[str]) -> None:
        """Import these modules (those installed) without binding any user name: a warm kernel's
        namespace is as empty as a new one's."""
        if modules:
            try:
                self.call("preload", modules=list(modules), timeout_s=self.limits.start_timeout_s)
            except HelperError as exc:
                raise InfrastructureError(str(exc)) from exc

    def seal(self) -> str:
        """Seal the measuring side before model-written code runs: a private copy of the helper, with
        the builtins as they are now, kept under a random token (returned) that later code cannot guess.
        See :meth:`sealed_fingerprint`."""
        try:
            return str(self.call("seal"))
        except HelperError as exc:
            raise InfrastructureError(str(exc)) from exc

    def sealed_fingerprint(
        self, token: str, canary: dict[str, object], *, timeout_s: float = MEASURE_TIMEOUT_S
    ) -> dict[str, str]:
        """Plant ``canary`` names (plain values: str, int) and take the namespace fingerprint with the
        helper sealed under ``token``, in one request. The caller checks the canaries' entries: a
        measuring side that later code froze or replaced cannot know them.

        The answer comes from code that may have been tampered with: anything but a bounded mapping of
        names to fingerprint strings is refused.

        Raises:
            KernelDiedError: The kernel died meanwhile.
            InfrastructureError: The measurement failed (the sealed helper is gone, broken or lying in a
                malformed way, or it ran past ``timeout_s``).
        """
        plant = "\n".join(f"{name} = {value!r}" for name, value in canary.items())
        expression = (
            f"__import__('sys').modules[{_HELPER_MODULE!r}].SEALED[{token!r}]['call']('namespace_fingerprint', '{{}}')"
        )
        reply, _, timed_out, _, _ = self._run(
            plant,
            silent=True,
            store_history=False,
            timeout_s=timeout_s,
            user_expressions={"fp": expression},
            interrupt=False,
        )
        if timed_out:
            raise InfrastructureError("the sealed fingerprint did not come back in time")
        if reply.get("status") != "ok":
            raise InfrastructureError(f"planting the canaries failed: {reply.get('ename')}: {reply.get('evalue')}")
        try:
            answer = _helper_value("namespace_fingerprint", reply.get("user_expressions", {}).get("fp", {}))
        except KernelDiedError:
            raise
        except Exception as exc:  # whatever a tampered helper makes of its answer
            raise InfrastructureError(f"the sealed fingerprint could not be read: {exc}") from exc
        if not (
            isinstance(answer, dict)
            and len(answer) <= MEASURE_MAX_NAMES
            and all(
                isinstance(k, str) and isinstance(v, str) and len(k) + len(v) <= MEASURE_MAX_ENTRY
                for k, v in answer.items()
            )
        ):
            raise InfrastructureError("the sealed fingerprint is not a mapping of names to fingerprints")
        return answer

    def snapshot(self) -> SnapshotInfo:
        """Save the user namespace to the snapshot store (content-addressed); unpicklable names skipped.

        Raises:
            SnapshotError: The namespace could not be saved.
            KernelDiedError: The kernel died meanwhile.
        """
        outbox = self.run_dir / _OUTBOX
        try:
            info = self.call("snapshot", store=self.launcher.kernel_path(outbox))
        except (InfrastructureError, HelperError) as exc:
            if isinstance(exc, KernelDiedError):
                raise
            raise SnapshotError(f"snapshot failed: {exc}") from exc
        try:
            snapshot = SnapshotInfo(**info)
        except (TypeError, ValueError) as exc:  # the answer names host paths: it must be well-formed
            raise SnapshotError(f"the kernel's snapshot answer is malformed: {exc}") from exc
        self._take_in(outbox / snapshot.digest[:2] / f"{snapshot.digest}.dill", snapshot.digest)
        try:
            self.store.note_environment(snapshot.digest, environment_label(self.environment))
        except OSError as exc:
            raise SnapshotError(f"could not record the environment of snapshot {snapshot.digest[:12]}: {exc}") from exc
        return snapshot

    def _take_in(self, written: Path, digest: str) -> None:
        """Move a snapshot the kernel wrote into the store, once its bytes hash to its name.

        The kernel owns the folder it wrote to: the file is opened without following links, must be a
        regular file no larger than the kernel's memory limit, and only that folder is removed after."""
        outbox = self.run_dir / _OUTBOX
        try:
            if written.parent.parent != outbox or len(digest) != 64:
                raise SnapshotError(f"the kernel named a snapshot outside its outbox: {written}")
            if self.store.path(digest).exists():
                return  # the same state was stored before: content-addressed, nothing to add
            fd = os.open(written, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                limit = self.limits.memory_mb * 1024 * 1024
                if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                    raise SnapshotCorruptError(f"the kernel's snapshot {digest[:12]} is not a regular file in bounds")
                data = f.read(limit + 1)
            if hashlib.sha256(data).hexdigest() != digest:
                raise SnapshotCorruptError(f"the kernel wrote a snapshot whose content does not hash to {digest[:12]}")
            self.store.add(digest, data)
        except OSError as exc:
            raise SnapshotError(f"could not store snapshot {digest[:12]}: {exc}") from exc
        finally:
            if written.parent.parent == outbox:
                shutil.rmtree(written.parent, ignore_errors=True)

    def restore(self, snapshot: SnapshotInfo | str, *, clean: bool = True, keep: Sequence[str] = ()) -> RestoreResult:
        """Load a snapshot (or digest) into the user namespace; with ``clean`` other user names go, but
        those in ``keep``.

        The kernel reads the file once, checks that its bytes hash to the digest, and loads those bytes:
        a file changed after it was written is never loaded.

        Returns:
            The names restored, and the namespace's fingerprint after the restore.

        Raises:
            SnapshotCorruptError: The file's content does not match its digest (nothing was loaded).
            SnapshotEnvironmentError: A kernel of another environment wrote it (nothing was loaded).
            SnapshotError: The file is missing or could not be loaded (a package it needs is absent, ...).
            InfrastructureError: The kernel failed meanwhile (died, timed out): its namespace is unknown.
        """
        digest = snapshot.digest if isinstance(snapshot, SnapshotInfo) else snapshot
        path = self.store.path(digest)
        if not path.exists():
            raise SnapshotError(f"no snapshot {digest[:12]} in {self.store.root}")
        mine, writers = environment_label(self.environment), self.store.environments(digest)
        if mine not in writers:
            raise SnapshotEnvironmentError(
                f"snapshot {digest[:12]} was written in kernel environment {', '.join(sorted(writers))}, "
                f"not in this kernel's ({mine}): not restored"
            )
        handed = self.run_dir / _INBOX / f"{digest}.dill"
        try:
            if self.store_access == "copy":
                shutil.copyfile(path, handed)
                os.chmod(handed, 0o644)
            answer = self.call(
                "restore",
                path=self.launcher.kernel_path(handed if self.store_access == "copy" else path),
                digest=digest,
                clean=clean,
                keep=list(keep),
            )
        except OSError as exc:
            raise SnapshotError(f"could not hand snapshot {digest[:12]} to the kernel: {exc}") from exc
        except HelperError as exc:  # dill raised while loading (a missing package, ...): nothing changed
            raise SnapshotError(f"restoring snapshot {digest[:12]} failed: {exc}") from exc
        finally:
            handed.unlink(missing_ok=True)
        if "corrupt" in answer:
            raise SnapshotCorruptError(f"snapshot {path}: {answer['corrupt']}")
        return RestoreResult(names=answer["names"], fingerprint=answer["fingerprint"])

    # -- protocol ------------------------------------------------------------------------------------

    @property
    def _kc(self) -> BlockingKernelClient:
        if self._client is None:
            raise InfrastructureError("the kernel is not started (or was closed)")
        return self._client

    def _died(self, during: str) -> KernelDiedError:
        reason = self._launcher.exit_reason() if self._launcher is not None else "closed"
        return KernelDiedError(f"the {self.backend} kernel died during {during} ({reason})")

    def _seen_on_iopub(self, msg_id: str, *, deadline: float) -> bool:
        while time.monotonic() < deadline:
            try:
                msg = self._kc.get_iopub_msg(timeout=max(0.0, min(deadline - time.monotonic(), _POLL_S)))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    def _drain_iopub(self) -> None:
        while True:
            try:
                self._kc.get_iopub_msg(timeout=0.01)
            except queue.Empty:
                return

    def _wait_shell_reply(self, msg_id: str, *, deadline: float, during: str) -> dict[str, Any]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Silent
            try:
                msg = self._kc.get_shell_msg(timeout=min(remaining, _POLL_S))
            except queue.Empty:
                if not self.launcher.is_alive():
                    raise self._died(during) from None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return dict(msg["content"])

    def _run(
        self,
        code: str,
        *,
        silent: bool,
        store_history: bool,
        timeout_s: float | None,
        user_expressions: dict[str, str] | None = None,
        interrupt: bool = True,
    ) -> tuple[dict[str, Any], list[dict[str, Any]], bool, bool, bool]:
        """Send one execute request; return (reply, outputs, timed_out, restarted, truncated)."""
        during = "an introspection call" if silent else "a cell execution"
        msg_id = self._kc.execute(
            code,
            silent=silent,
            store_history=store_history,
            user_expressions=user_expressions or {},
            allow_stdin=False,
            stop_on_error=False,
        )
        outputs = OutputCollector(self.limits.output_limit_bytes)
        deadline = time.monotonic() + (timeout_s or self.limits.timeout_s)
        timed_out = False
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if not interrupt:  # the caller discards the kernel: no interrupt, no restart
                    return {"status": "error"}, outputs.finish(), True, False, outputs.truncated
                if timed_out:  # interrupted and still busy: the kernel is wedged
                    self.restart()
                    return {"status": "error"}, outputs.finish(), True, True, outputs.truncated
                timed_out = True
                self.launcher.interrupt()
                deadline = time.monotonic() + self.limits.interrupt_grace_s
                continue
            try:
                msg = self._kc.get_iopub_msg(timeout=min(remaining, _POLL_S))
            except queue.Empty:
                if not self.launcher.is_alive():
                    raise self._died(during) from None
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status":
                idle = msg["content"]["execution_state"] == "idle"
            else:
                outputs.add_message(msg)
        try:
            reply = self._wait_shell_reply(
                msg_id, deadline=time.monotonic() + max(self.limits.interrupt_grace_s, 5.0), during=during
            )
        except _Silent:
            raise KernelTimeoutError(f"the {self.backend} kernel went idle but sent no reply") from None
        return reply, outputs.finish(), timed_out, False, outputs.truncated


class _Silent(Exception):
    """No reply before the deadline (internal)."""
