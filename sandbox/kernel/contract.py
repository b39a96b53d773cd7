"""The kernel contract: what every kernel offers its callers, however it was made.

`KernelLike` is narrow, and a test holds its members to this list: the facts (`backend`, `environment`,
`limits`, `store`, `restarts`, `launcher`), the lifetime (`start`, `close`, `is_alive`, `interrupt`,
`restart`), `execute` and `call`, and two named parts, `snapshots` (`SnapshotsLike`) and `introspect`
(`IntrospectionLike`). [`Kernel`][themisto_env.sandbox.Kernel] (started by a backend, or forked from a
[`KernelTemplate`][themisto_env.sandbox.KernelTemplate]) satisfies it, and the factories are typed with it, so
code written against the contract cannot tell a started kernel from a forked one and one conformance suite
(`themisto_env.sandbox.kernel.conformance`) runs on all.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from themisto_env.sandbox.kernel.answers import (
    FrameView,
    FrameViewName,
    MemoryReport,
    NamespaceState,
    SourceText,
    VariableDetail,
    VariableListing,
)
from themisto_env.sandbox.models import ExecutionResult, RestoreResult, SandboxLimits, SnapshotInfo
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.store.workdir import FileStore, FileTree

__all__ = [
    "MEASURE_TIMEOUT_S",
    "IntrospectionLike",
    "KernelLike",
    "LauncherReadings",
    "SnapshotsLike",
    "broken_members",
    "contract_members",
]

#: How long a sealed measurement after model-written code may take (seconds).
MEASURE_TIMEOUT_S = 10.0


class LauncherReadings(Protocol):
    """What callers read of a kernel's launcher: its limits and the backend's health, taken from outside the
    kernel (a [`KernelLauncher`][themisto_env.sandbox.KernelLauncher])."""

    @property
    def enforces_limits(self) -> bool:
        """Whether memory, CPU and process limits are enforced (else there are no limit hits to read)."""
        ...

    def pid(self) -> int | None:
        """The kernel's process id as seen from the kernel's host, if it can be read."""
        ...

    def limit_events(self) -> dict[str, int]:
        """How often the kernel hit its limits so far (``oom_kill``, ``pids_max``)."""
        ...

    def out_of_memory(self) -> bool:
        """Whether the backend saw the kernel killed at its memory limit."""
        ...

    def check_backend(self) -> None:
        """Raise [`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] when the backend itself is
        gone."""
        ...


class KernelLike(Protocol):
    """A Jupyter kernel as its callers use it (see the module docstring for the implementations).

    Every implementation answers with the same models and raises the same exceptions
    (`themisto_env.errors`) for the same causes; the method docs are `Kernel`'s
    (`themisto_env.sandbox.kernel.core`), its parts' on `KernelSnapshots` and `KernelIntrospection`.
    """

    @property
    def backend(self) -> str:
        """The backend that runs the kernel (``local``, ``bwrap``, ``docker``)."""
        ...

    @property
    def environment(self) -> str | None:
        """The kernel environment's id (None: the tool's own Python or the default image)."""
        ...

    @property
    def limits(self) -> SandboxLimits:
        """The kernel's limits."""
        ...

    @property
    def store(self) -> SnapshotStore:
        """The snapshot store its snapshots go to and are restored from."""
        ...

    @property
    def restarts(self) -> int:
        """How often the kernel process was restarted (by [`restart`][themisto_env.sandbox.KernelLike.restart], or after
        a wedged cell)."""
        ...

    @property
    def launcher(self) -> LauncherReadings:
        """The launcher's readings (limits enforced, limit events, the backend's health, the pid)."""
        ...

    @property
    def snapshots(self) -> SnapshotsLike:
        """The kernel's snapshots and working folder (see `SnapshotsLike`)."""
        ...

    @property
    def introspect(self) -> IntrospectionLike:
        """The read-only questions about the kernel's state (see `IntrospectionLike`)."""
        ...

    # -- lifetime ----------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the kernel and wait until it answers (a no-op once started). Returns ``self``."""
        ...

    def close(self, *, graceful: bool = True) -> None:
        """Stop the kernel and remove what it holds. Idempotent."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def is_alive(self) -> bool:
        """Whether the kernel process is running."""
        ...

    def interrupt(self) -> None:
        """Send an interrupt (SIGINT) to the kernel."""
        ...

    def restart(self) -> None:
        """Kill the kernel process and start a fresh one (the user's state is gone)."""
        ...

    # -- execution ---------------------------------------------------------------------------------------

    def execute(
        self, code: str, *, timeout_s: float | None = None, fingerprint: bool = False, interrupt: bool = True
    ) -> ExecutionResult:
        """Run a cell as a user would and return what it produced."""
        ...

    def call(self, function: str, *, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Run a function of the in-kernel helper without touching the user's state; return its value."""
        ...


class SnapshotsLike(Protocol):
    """A kernel's snapshots (``kernel.snapshots``): save the user namespace to the store and restore it,
    and the working folder's files (what a served state holds besides the namespace)."""

    def save(self) -> SnapshotInfo:
        """Save the user namespace to the snapshot store."""
        ...

    def restore(self, snapshot: SnapshotInfo | str, *, clean: bool = True, keep: Sequence[str] = ()) -> RestoreResult:
        """Load a snapshot (or digest) of the store into the user namespace."""
        ...

    @property
    def workdir(self) -> Path:
        """The kernel's working folder (its current directory), on the kernel's host."""
        ...

    def files(self) -> FileTree:
        """The working folder's files: relative path -> sha256."""
        ...

    def set_files(self, tree: FileTree, store: FileStore) -> None:
        """Make the working folder hold exactly ``tree``'s files, taken from ``store``."""
        ...


class IntrospectionLike(Protocol):
    """A kernel's introspection (``kernel.introspect``): none of it changes the user namespace, ``_``,
    ``Out``, the execution counter or the history.

    An implementation answers `ask` (and the calls below it); the typed questions above it are `ask` of a
    call of `ANSWERS`, inherited by subclassing this protocol.
    """

    def ask(self, call: str, /, **args: Any) -> Any:
        """The helper's answer to ``call`` (a name of `ANSWERS`) with these JSON-able arguments, validated into
        the call's model.

        Raises:
            UnknownNameError: No user variable has the name asked for (the message names the nearest ones).
            IntrospectionRefused: The helper declined (not a DataFrame, no source, ...).
            HelperError: The helper failed on the user's data (the kernel is fine).
            InfrastructureError: The kernel could not answer (it died, or stopped answering).
        """
        ...

    def list_variables(self, *, limit: int = 100, known: Mapping[str, int] | None = None) -> VariableListing:
        """The user's variables sorted by name, with type, size, and shape or length (modules left out), at
        most ``limit`` rows; the sizes in ``known`` are reported as they are, not measured."""
        listing: VariableListing = self.ask("list_variables", limit=limit, **_known(known))
        return listing

    def inspect_variable(self, name: str, *, max_chars: int = 2000) -> VariableDetail:
        """One variable: type, shape, length, size, dtype(s) and its repr cut to ``max_chars``."""
        detail: VariableDetail = self.ask("inspect_variable", name=name, max_chars=max_chars)
        return detail

    def dataframe(self, name: str, view: FrameViewName = "head", *, n: int = 5, max_chars: int = 4000) -> FrameView:
        """``head(n)``, ``info()`` or ``describe()`` of a pandas DataFrame or Series, as text."""
        frame: FrameView = self.ask("dataframe", name=name, view=view, n=n, max_chars=max_chars)
        return frame

    def memory(self, *, top: int = 20, known: Mapping[str, int] | None = None) -> MemoryReport:
        """The kernel's resident memory, the user variables' total size and the ``top`` largest ones."""
        report: MemoryReport = self.ask("memory", top=top, **_known(known))
        return report

    def source(self, name: str, *, max_chars: int = 4000) -> SourceText:
        """The source of a function or class (of a bound method's function; of another object's class)."""
        text: SourceText = self.ask("source", name=name, max_chars=max_chars)
        return text

    def namespace_state(self) -> NamespaceState:
        """What introspection must never change: user names with object ids and types, ``_``, ``Out``'s
        keys, the execution counter and the history's length (comparable within one kernel process)."""
        state: NamespaceState = self.ask("state_fingerprint")
        return state

    def variable_sizes(self) -> dict[str, int]:
        """Approximate deep size in bytes of every user variable."""
        ...

    def fingerprint(self) -> dict[str, str]:
        """The user namespace's fingerprint (equal in two kernels in the same state)."""
        ...

    def package_versions(self, names: Sequence[str]) -> dict[str, str]:
        """The versions of these distributions where the kernel runs (``absent`` if not installed)."""
        ...

    def loaded_distributions(self) -> dict[str, str]:
        """Installed distributions whose modules the kernel has imported so far."""
        ...

    def preload(self, modules: Sequence[str]) -> None:
        """Import these modules without binding any user name."""
        ...

    def seal(self) -> str:
        """Seal the measuring side before model-written code runs; return its token."""
        ...

    def sealed_fingerprint(
        self, token: str, canary: dict[str, object], *, timeout_s: float = MEASURE_TIMEOUT_S
    ) -> dict[str, str]:
        """Plant ``canary`` names and take the fingerprint with the sealed helper, in one request."""
        ...


def _known(known: Mapping[str, int] | None) -> dict[str, Any]:
    return {"known": dict(known)} if known else {}


def contract_members(protocol: type) -> dict[str, Any]:
    """The members a protocol of this module declares: its methods and properties, ``__enter__`` and
    ``__exit__`` included (what an implementation must offer)."""
    skip = {"__init__", "__subclasshook__", "__protocol_attrs__", "__non_callable_proto_members__"}
    return {
        name: value
        for name, value in vars(protocol).items()
        if (not name.startswith("_") or name in ("__enter__", "__exit__"))
        and name not in skip
        and (callable(value) or isinstance(value, property))
    }


def broken_members(implementation: object, protocol: type) -> list[str]:
    """Which members of ``protocol`` the object lacks, or offers with another signature (parameter names,
    kinds, defaults and annotations; ``self`` aside); empty when it offers them all. A property may be a
    plain attribute. Nothing is called: the object's class is read, not its state."""
    broken = []
    for name, declared in contract_members(protocol).items():
        try:
            offered = inspect.getattr_static(implementation, name)
        except AttributeError:
            broken.append(f"{name}: missing")
            continue
        if isinstance(declared, property):
            if callable(offered) and not isinstance(offered, property):
                broken.append(f"{name}: a method, not an attribute")
            continue
        if not callable(offered):
            broken.append(f"{name}: not a method")
            continue
        wanted, got = inspect.signature(declared), inspect.signature(offered)
        wanted_params = [(p.name, p.kind, p.default, p.annotation) for p in wanted.parameters.values()][1:]
        got_params = [(p.name, p.kind, p.default, p.annotation) for p in got.parameters.values()][1:]
        if wanted_params != got_params or wanted.return_annotation not in (got.return_annotation, "Self"):
            broken.append(f"{name}: {got} is not {wanted}")
    return broken
