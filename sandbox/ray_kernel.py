"""Kernels in Ray actors: the kernel runs on a cluster's CPU node, its owner (an env, a trainer) stays put.

A :class:`RemoteKernel` is a :class:`~themisto_env.sandbox.kernel.Kernel` whose process lives on another
node: a Ray actor (:class:`KernelHost`) owns a real Kernel there, and every call (execute, restore, the
introspection calls, the launcher's limit readings) goes to it and comes back as the same typed answer or
the same exception. Code that drives kernels (the state server, the disposable kernels, the tools) cannot
tell the two apart; :func:`make_kernel` makes one or the other from a :class:`RayPlacement`.

What travels, and what does not:

- **Snapshots** stay in the owner's store (the truth about which exist). A snapshot the actor's node lacks
  is sent with the restore that needs it (once per node: it is kept in the node's store), and one a
  remote kernel writes is fetched into the owner's store. On one machine, or with the store on a shared
  folder, both stores are the same folder and nothing is copied.
- **Working folder files** are sent the same way, blob by blob, into a store in the node's cache
  (copied there from the owner's folder when the node sees it).
- **Failures**: a kernel that dies is a :class:`~themisto_env.errors.KernelDiedError`, as on this machine;
  so is an actor that is lost (its node removed, its process killed) or does not answer in time. An actor
  that cannot be placed (no node offers the resources asked for) is a
  :class:`~themisto_env.errors.KernelStartError` naming them.

Lifetime: an actor lives as long as its RemoteKernel (closing it or collecting it kills the actor). Ray
ends an owner's actors when the owner's process ends, and with them their process trees (the kernels);
what such a kernel leaves on disk (its run directory) is removed by the next kernel started on that node,
as any first kernel start of a process removes a dead owner's leftovers (see
:mod:`~themisto_env.sandbox.lifetime`).
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from themisto_env.errors import (
    InfrastructureError,
    KernelDiedError,
    KernelStartError,
    SnapshotCorruptError,
    SnapshotError,
)
from themisto_env.sandbox.kernel_environments import environment_label
from themisto_env.sandbox.kernel_host import KernelHost
from themisto_env.sandbox.models import SandboxLimits, SnapshotInfo
from themisto_env.sandbox.ray_cluster import connect, import_ray, owner_variables
from themisto_env.sandbox.ray_placement import RayPlacement
from themisto_env.sandbox.snapshots import SnapshotStore
from themisto_env.sandbox.workdir import FileStore, FileTree

__all__ = ["KernelHost", "RayPlacement", "RemoteKernel", "make_kernel"]

#: Seconds an answer may take beyond the kernel's own limits before the actor is taken for lost.
ANSWER_GRACE_S = 120.0


def make_kernel(
    backend: str = "local",
    *,
    ray: RayPlacement | None = None,
    limits: SandboxLimits | None = None,
    snapshot_dir: str | Path | None = None,
    store_access: Literal["read", "copy"] = "read",
    launcher_options: dict[str, Any] | None = None,
    environment: str | None = None,
) -> Any:
    """A :class:`~themisto_env.sandbox.kernel.Kernel` on this machine, or a :class:`RemoteKernel` placed on
    Ray by ``ray`` (same arguments, same behaviour; neither is started)."""
    options: dict[str, Any] = {
        "limits": limits,
        "snapshot_dir": snapshot_dir,
        "store_access": store_access,
        "launcher_options": launcher_options,
        "environment": environment,
    }
    if ray is None:
        from themisto_env.sandbox.kernel import Kernel

        return Kernel(backend, **options)
    return RemoteKernel(backend, placement=ray, **options)


class _LauncherView:
    """The launcher readings the disposable kernels take, answered by the remote kernel's launcher."""

    def __init__(self, kernel: RemoteKernel) -> None:
        self._kernel = kernel
        self.enforces_limits = bool(kernel._read("launcher.enforces_limits"))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._kernel._invoke(f"launcher.{name}", *args, **kwargs)


class RemoteKernel:
    """A kernel in a Ray actor (see the module docstring). Same arguments and methods as
    :class:`~themisto_env.sandbox.kernel.Kernel`, plus ``placement``.

    Args:
        backend: The backend on the kernel's node (``local``, ``bwrap``, ``docker``).
        placement: Where and how the actor runs.
        limits: Per-execution and per-kernel limits.
        snapshot_dir: The owner's snapshot store (the node's is ``placement.snapshot_dir``, or this path).
        store_access: As for Kernel.
        launcher_options: As for Kernel.
        environment: As for Kernel (the kernel environment must exist on the node).
    """

    def __init__(
        self,
        backend: str = "local",
        *,
        placement: RayPlacement | None = None,
        limits: SandboxLimits | None = None,
        snapshot_dir: str | Path | None = None,
        store_access: Literal["read", "copy"] = "read",
        launcher_options: dict[str, Any] | None = None,
        environment: str | None = None,
    ) -> None:
        self.backend = backend
        self.environment = environment
        self.placement = placement or RayPlacement()
        self.limits = limits or SandboxLimits()
        self.store = SnapshotStore(snapshot_dir)
        self.store_access = store_access
        self.restarts = 0
        self.node = ""  # host:pid of the actor, once started
        self.node_id = ""  # the Ray node it runs on, once started
        self._options: dict[str, Any] = {
            "limits": self.limits,
            "snapshot_dir": self.placement.snapshot_dir or str(self.store.root.resolve()),
            "store_access": store_access,
            "launcher_options": launcher_options,
            "environment": environment,
        }
        self._actor: Any = None
        self._launcher: _LauncherView | None = None
        self._lock = threading.Lock()
        self._isolated: bool | None = None

    # -- the actor -------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Place the actor, start the kernel on its node and wait until it answers. Returns ``self``.

        Raises:
            KernelStartError: No node took the actor in time, or the kernel did not start there.
            ConfigError: The kernel's options are wrong (as for a local kernel).
        """
        with self._lock:
            if self._actor is not None:
                return self
            ray = import_ray()
            connect(self.placement.address)
            options: dict[str, Any] = {
                "num_cpus": self.placement.num_cpus,
                "max_restarts": 0,
                "max_concurrency": 4,  # a close or an interrupt is not queued behind a long execute
                "scheduling_strategy": self.placement.scheduling,
            }
            if self.placement.resources:
                options["resources"] = dict(self.placement.resources)
            if self.placement.memory_mb:
                options["memory"] = self.placement.memory_mb * 2**20
            actor = ray.remote(KernelHost).options(**options)
            self._actor = actor.remote(self.backend, self._options, None, owner_variables())
        try:
            self.node, self.node_id = self._call("ready", wait_s=self.placement.start_timeout_s, during="start")
        except InfrastructureError as exc:
            self._kill()
            asked = {"CPU": self.placement.num_cpus, **self.placement.resources}
            wanted = ", ".join(f"{k}={v:g}" for k, v in asked.items())
            raise KernelStartError(f"no Ray node took the kernel's actor ({wanted}): {exc}") from None
        try:
            self._call("start", wait_s=self.limits.start_timeout_s + ANSWER_GRACE_S, during="start")
        except KernelDiedError as exc:
            self._kill()
            raise KernelStartError(str(exc)) from None
        except BaseException:
            self._kill()
            raise
        return self

    def _call(self, method: str, *args: Any, wait_s: float | None = None, during: str = "") -> Any:
        """Call a :class:`KernelHost` method and return its value, or raise what it raised there.

        Raises:
            KernelDiedError: The actor is lost (its process, its node, Ray itself) or silent for ``wait_s``
                (it is then ended): the kernel is gone, as when a local kernel dies.
            InfrastructureError: Ray could not carry the call (an object store full, ...).
        """
        ray = import_ray()
        during, wait_s = during or method, wait_s or self._wait()
        where = f"the {self.backend} kernel on Ray ({self.node or 'not placed'})"
        try:
            ref = getattr(self._host, method).remote(*args)
            ok, value = ray.get(ref, timeout=wait_s)
        except ray.exceptions.GetTimeoutError:
            self._kill()
            raise KernelDiedError(
                f"{where} did not answer within {wait_s or self._wait():g} s during {during}: taken for lost"
            ) from None
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            self._kill()
            raise KernelDiedError(f"{where} was lost during {during}: {_first_line(exc)}") from None
        except ray.exceptions.RayError as exc:  # the call itself failed (a value too large, ...): not the kernel
            raise InfrastructureError(f"{where}: Ray could not carry {during}: {_first_line(exc)}") from None
        if not ok:
            raise value
        return value

    @property
    def _host(self) -> Any:
        if self._actor is None:
            raise InfrastructureError("the kernel is not started (or was closed)")
        return self._actor

    def _wait(self, timeout_s: float | None = None) -> float:
        """How long to wait for an answer: the kernel's own limit for the call and what may follow it (an
        interrupt's grace, a restart), and a margin."""
        limits = self.limits
        return (timeout_s or limits.timeout_s) + limits.interrupt_grace_s + limits.start_timeout_s + ANSWER_GRACE_S

    def _invoke(self, path: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``kernel.<path>(*args, **kwargs)`` in the actor (a ``timeout_s`` goes with the call and sets
        the wait) and return its value, or raise its exception."""
        return self._call("invoke", path, args, kwargs, wait_s=self._wait(kwargs.get("timeout_s")), during=path)

    def _read(self, path: str) -> Any:
        return self._call("read", path, during=path)

    def _kill(self) -> None:
        actor, self._actor = self._actor, None
        if actor is not None:
            with contextlib.suppress(Exception):
                import_ray().kill(actor)

    def close(self, *, graceful: bool = True) -> None:
        """Close the kernel on its node and end the actor. Idempotent."""
        actor = self._actor
        if actor is None:
            return
        with contextlib.suppress(Exception):  # an actor already lost has nothing left to close
            import_ray().get(actor.close.remote(graceful), timeout=self.limits.start_timeout_s + 30)
        self._kill()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:  # last resort: never leave an actor behind
        if getattr(self, "_actor", None) is not None:
            with contextlib.suppress(Exception):
                self._kill()

    # -- the kernel's process ---------------------------------------------------------------------------

    @property
    def isolated(self) -> bool:
        """Whether the backend isolates the kernel from its node."""
        if self._isolated is None:
            self._isolated = bool(self._read("isolated"))
        return self._isolated

    @property
    def launcher(self) -> _LauncherView:
        """The remote launcher's readings (limits enforced, limit events, memory, the backend's health)."""
        if self._launcher is None:
            self._launcher = _LauncherView(self)
        return self._launcher

    @property
    def workdir(self) -> Path:
        """The kernel's working folder, on its node."""
        return Path(self._read("workdir"))

    @property
    def run_dir(self) -> Path:
        """The kernel's run directory, on its node."""
        return Path(self._read("run_dir"))

    def is_alive(self) -> bool:
        """Whether the actor and its kernel process are running."""
        if self._actor is None:
            return False
        try:
            return bool(self._invoke("is_alive"))
        except InfrastructureError:
            return False

    def restart(self) -> None:
        """Kill the kernel process and start a fresh one (on the same node)."""
        self._invoke("restart")
        self.restarts += 1

    def interrupt(self) -> None:
        """Send an interrupt to the kernel."""
        self._invoke("interrupt")

    # -- execution and introspection: the kernel's answers, as they are ----------------------------------

    def execute(self, code: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """As :meth:`Kernel.execute <themisto_env.sandbox.kernel_messaging.KernelMessaging.execute>`."""
        return self._invoke("execute", code, timeout_s=timeout_s, **kwargs)  # the limit travels with the call

    def call(self, function: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """As :meth:`Kernel.call <themisto_env.sandbox.kernel_messaging.KernelMessaging.call>`."""
        return self._invoke("call", function, timeout_s=timeout_s, **kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """The kernel's other methods (``list_variables``, ``fingerprint``, ``seal``, ...), called remotely."""
        if name.startswith("_") or name not in _FORWARDED:
            raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")
        return lambda *args, **kwargs: self._invoke(name, *args, **kwargs)

    # -- what travels -------------------------------------------------------------------------------------

    def snapshot(self) -> SnapshotInfo:
        """Save the namespace to the node's store, and bring the snapshot to the owner's store (recording,
        as a local kernel does, that this kernel's environment wrote it)."""
        info: SnapshotInfo = self._invoke("snapshot")
        if info.digest not in self.store:
            found = self._call("get_snapshot", info.digest, during="snapshot")
            if found is not None:
                self.store.add(info.digest, found[0])
        try:
            self.store.note_environment(info.digest, environment_label(self.environment))
        except OSError as exc:
            raise SnapshotError(f"could not record the environment of snapshot {info.digest[:12]}: {exc}") from exc
        return info

    def restore(self, snapshot: SnapshotInfo | str, *, clean: bool = True, keep: Sequence[str] = ()) -> Any:
        """Restore a snapshot of the owner's store, sent to the node first if it lacks it.

        Raises:
            SnapshotCorruptError: The owner's copy does not hash to its digest (set it aside, as for a local
                kernel). A node's copy found damaged is replaced by the owner's and the restore tried again.
            (and what :meth:`Kernel.restore <themisto_env.sandbox.kernel_snapshots.KernelSnapshots.restore>`
            raises.)
        """
        digest = snapshot.digest if isinstance(snapshot, SnapshotInfo) else snapshot
        if self._call("missing_snapshots", [digest], during="restore"):
            self._send_snapshot(digest)
        try:
            return self._invoke("restore", digest, clean=clean, keep=keep)
        except SnapshotCorruptError:
            if self._send_snapshot(digest) is None:  # the node's copy was damaged: the owner's, once more
                return self._invoke("restore", digest, clean=clean, keep=keep)
            raise

    def _send_snapshot(self, digest: str) -> str | None:
        """Send the owner's copy of a snapshot to the node; None, or why it was not sent (the owner lacks
        it: the restore then says so). A copy that does not hash to its digest is the owner's damage.

        Raises:
            SnapshotCorruptError: The owner's copy is damaged.
        """
        if digest not in self.store:
            return "missing"
        try:
            data = self.store.path(digest).read_bytes()
        except OSError:
            return "unreadable"
        if hashlib.sha256(data).hexdigest() != digest:
            raise SnapshotCorruptError(f"snapshot {self.store.path(digest)}: its content does not hash to its name")
        self._call("put_snapshot", digest, data, sorted(self.store.environments(digest)), during="restore")
        return None

    def set_files(self, tree: FileTree, store: FileStore) -> None:
        """Make the working folder hold ``tree``'s files, sending the node the contents it lacks (files the
        kernel writes stay on its node: their digests are compared, as for a local kernel)."""
        owner_root = str(Path(store.root).resolve())
        missing = self._call("missing_blobs", sorted(tree.values()), owner_root, during="set_files")
        if missing:
            names = {sha: path for path, sha in tree.items()}
            self._call("put_blobs", {sha: store.read(sha, name=names[sha]) for sha in missing}, during="set_files")
        self._call("set_files", tree, during="set_files")


#: The kernel methods a RemoteKernel forwards as they are (their arguments and answers are plain data).
_FORWARDED = frozenset(
    {
        "files",
        "memory_bytes",
        "list_variables",
        "inspect_variable",
        "dataframe",
        "memory",
        "variable_sizes",
        "source",
        "namespace_state",
        "fingerprint",
        "package_versions",
        "loaded_distributions",
        "preload",
        "seal",
        "sealed_fingerprint",
    }
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
