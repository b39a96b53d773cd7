"""Kernels in Ray actors: the kernel runs on a cluster's CPU node, its owner (an env, a trainer) stays put.

A [`RemoteKernel`][themisto_env.sandbox.RemoteKernel] is a [`KernelLike`][themisto_env.sandbox.KernelLike] whose
process lives on another node: a Ray actor (`KernelHost`) owns a real kernel there, and every call goes to
it and comes back as the same typed answer or the same exception (its parts are in
`themisto_env.sandbox.ray.parts`). Snapshots and working-folder files stay in the owner's store and are sent
to a node once, when a restore needs them; a lost actor is a
[`KernelDiedError`][themisto_env.errors.KernelDiedError]. The actor lives as long as its RemoteKernel. How
to run on a cluster: docs/ray.md.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any, Self, Unpack

from themisto_env.errors import (
    InfrastructureError,
    KernelDiedError,
    KernelStartError,
)
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.spec import KernelFields, KernelSpec, RayPlacement
from themisto_env.sandbox.models import ExecutionResult
from themisto_env.sandbox.ray.cluster import connect, import_ray, owner_variables
from themisto_env.sandbox.ray.host import KernelHost
from themisto_env.sandbox.ray.parts import RemoteIntrospection, RemoteSnapshots
from themisto_env.sandbox.store.snapshot_store import SnapshotStore

__all__ = ["RemoteKernel", "live_remote_kernels", "make_kernel", "remote_kernel_memory"]

#: Seconds an answer may take beyond the kernel's own limits before the actor is taken for lost.
ANSWER_GRACE_S = 120.0

_started: weakref.WeakSet[RemoteKernel] = weakref.WeakSet()  # this process's, placed and not closed yet
_started_lock = threading.Lock()


def make_kernel(spec: KernelSpec | str = "local", /, **fields: Unpack[KernelFields]) -> KernelLike:
    """A kernel of ``spec`` (a `KernelSpec`, or a backend's name with ``fields`` as in `KernelSpec.of`): a
    [`Kernel`][themisto_env.sandbox.Kernel] on this machine, or a [`RemoteKernel`][themisto_env.sandbox.RemoteKernel]
    placed on Ray by the spec's ``ray`` (same behaviour; neither is started)."""
    spec = KernelSpec.of(spec, **fields)
    if spec.ray is None:
        from themisto_env.sandbox.kernel.core import Kernel

        return Kernel(spec)
    return RemoteKernel(spec)


class _LauncherView:
    """The remote kernel's launcher readings (`LauncherReadings`),
    answered by the launcher on the kernel's node."""

    def __init__(self, kernel: RemoteKernel) -> None:
        self._kernel = kernel
        self.enforces_limits = bool(kernel._read("launcher.enforces_limits"))

    def pid(self) -> int | None:
        """The kernel's process id on its node."""
        pid: int | None = self._kernel._invoke("launcher.pid")
        return pid

    def memory_bytes(self) -> int | None:
        """Resident memory of the kernel process."""
        memory: int | None = self._kernel._invoke("launcher.memory_bytes")
        return memory

    def limit_events(self) -> dict[str, int]:
        """How often the kernel hit its limits so far."""
        return dict(self._kernel._invoke("launcher.limit_events"))

    def out_of_memory(self) -> bool:
        """Whether the backend saw the kernel killed at its memory limit."""
        return bool(self._kernel._invoke("launcher.out_of_memory"))

    def check_backend(self) -> None:
        """Raise [`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] when the node's backend is
        gone."""
        self._kernel._invoke("launcher.check_backend")


class RemoteKernel:
    """A kernel in a Ray actor (see the module docstring). Same arguments and methods as
    [`Kernel`][themisto_env.sandbox.Kernel], plus ``placement``.

    Args:
        spec: What kind of kernel (a `KernelSpec`, or the backend on the kernel's node: ``local``,
            ``bwrap``, ``docker``). Its ``snapshot_dir`` is the owner's store (the node's is
            ``placement.snapshot_dir``, or this path); its ``environment`` must exist on the node.
        placement: Where and how the actor runs (default: the spec's ``ray``, else Ray's defaults).
        **fields: The spec's fields to set or replace, as for Kernel.
    """

    def __init__(
        self,
        spec: KernelSpec | str = "local",
        *,
        placement: RayPlacement | None = None,
        **fields: Unpack[KernelFields],
    ) -> None:
        spec = KernelSpec.of(spec, **fields)
        self.placement = placement or spec.ray or RayPlacement()
        self.spec = KernelSpec.of(spec, ray=self.placement)
        self.backend = spec.backend
        self.environment = spec.environment
        self.limits = spec.limits
        self.store = SnapshotStore(spec.snapshot_dir)
        self.store_access = spec.store_access
        launcher_options = spec.options or None
        self.restarts = 0
        self.node = ""  # host:pid of the actor, once started
        self.node_id = ""  # the Ray node it runs on, once started
        self._options: dict[str, Any] = {
            "limits": self.limits,
            "snapshot_dir": self.placement.snapshot_dir or str(self.store.root.resolve()),
            "store_access": spec.store_access,
            "launcher_options": launcher_options,
            "environment": spec.environment,
        }
        self._actor: Any = None
        self._launcher: _LauncherView | None = None
        self._snapshots: RemoteSnapshots | None = None
        self._introspect: RemoteIntrospection | None = None
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
        with _started_lock:
            _started.add(self)
        return self

    def _call(self, method: str, *args: Any, wait_s: float | None = None, during: str = "") -> Any:
        """Call a `KernelHost` method and return its value, or raise what it raised there.

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

    # -- execution: the kernel's answers, as they are ----------------------------------------------------

    def execute(
        self, code: str, *, timeout_s: float | None = None, fingerprint: bool = False, interrupt: bool = True
    ) -> ExecutionResult:
        """As [`Kernel.execute`][themisto_env.sandbox.Kernel.execute] (the limit travels with
        the call)."""
        result: ExecutionResult = self._invoke(
            "execute", code, timeout_s=timeout_s, fingerprint=fingerprint, interrupt=interrupt
        )
        return result

    def call(self, function: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """As [`Kernel.call`][themisto_env.sandbox.Kernel.call]."""
        return self._invoke("call", function, timeout_s=timeout_s, **kwargs)

    # -- the parts: forwarded over the actor ---------------------------------------------------------------

    @property
    def snapshots(self) -> RemoteSnapshots:
        """The kernel's snapshots and working folder; what travels is said on `RemoteSnapshots`."""
        if self._snapshots is None:
            self._snapshots = RemoteSnapshots(self)
        return self._snapshots

    @property
    def introspect(self) -> RemoteIntrospection:
        """The kernel's introspection, asked of the kernel on its node (the same answers and exceptions)."""
        if self._introspect is None:
            self._introspect = RemoteIntrospection(self)
        return self._introspect


def live_remote_kernels() -> list[RemoteKernel]:
    """This process's remote kernels whose actor is placed and was not closed or lost (no call to Ray)."""
    with _started_lock:
        kernels = list(_started)
    return [kernel for kernel in kernels if kernel._actor is not None]


def remote_kernel_memory(timeout_s: float = 2.0) -> tuple[int, int]:
    """Resident memory of this process's remote kernels, asked of every actor at once: the bytes summed over
    the kernels that answered within ``timeout_s``, and how many answered (a kernel's process only: not its
    actor's, whose memory Ray holds)."""
    kernels = live_remote_kernels()
    if not kernels:
        return 0, 0
    ray = import_ray()
    refs = []
    for kernel in kernels:
        with contextlib.suppress(Exception):  # closed meanwhile
            refs.append(kernel._host.invoke.remote("launcher.memory_bytes", (), {}))
    ready, _late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    total = answered = 0
    for ref in ready:
        with contextlib.suppress(Exception):  # a lost actor answers its error
            ok, value = ray.get(ref, timeout=0)
            if ok and value is not None:
                total, answered = total + int(value), answered + 1
    return total, answered


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
