"""State templates: a child of a kernel template that loaded a snapshot once, and copies forked from it.

`StateTemplates` is the part of `KernelTemplate` that makes, keeps and retires the state templates of
snapshots (the least recently used going first) and forks copies of a state; on a backend whose copies take
uids of their own it makes none (`NO_STATE_TEMPLATES`): each copy restores the state itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from themisto_env.errors import KernelStartError, SnapshotCorruptError, SnapshotError, TemplateGoneError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.template.launchers import REQUEST_TIMEOUT_S
from themisto_env.sandbox.template.prebuild import note_prebuild

__all__ = ["NO_STATE_TEMPLATES", "NO_STATE_TEMPLATES_ISOLATED", "STATE_TEMPLATES", "StateTemplates"]

#: How many state templates a template keeps (least recently used go first); each holds a loaded state.
STATE_TEMPLATES = 8
#: Why a template whose copies take uids of their own (docker) makes no state template: a snapshot is the
#: dataset's code (unpickling runs it), and a state template loads it in a process that keeps the capabilities
#: (``CAP_SETUID``, ``CAP_SETGID``) that give each copy its uid, which the loaded code could use to become any
#: copy, or root (the owner of the template's files). Each copy restores a state itself, under its own uid.
NO_STATE_TEMPLATES = (
    "copies that take uids of their own restore a state themselves (a state template would load the dataset's "
    "code with the capabilities that give copies their uids)"
)
#: Why a bwrap template for model-written code makes no state template: its copies isolate themselves after the
#: fork (namespaces of their own), and a state template loads the snapshot (the dataset's code) before that,
#: in the template's namespaces, where it could reach every copy forked from it. Each copy restores it itself.
NO_STATE_TEMPLATES_ISOLATED = (
    "copies that isolate themselves restore a state themselves (a state template would load the dataset's code "
    "outside their namespaces, beside every copy)"
)


class StateTemplates:
    """The state templates of a `KernelTemplate` (its base class: the attributes below are the template's)."""

    spec: KernelSpec
    store: SnapshotStore
    store_access: str
    environment: str | None
    reseed: bool
    spares: int
    digest: str | None
    base: Any
    socket_path: Path | None
    hazards: list[str]
    _lock: threading.RLock
    _states: OrderedDict[str, Any]
    _retired: list[Any]
    _identities: Any
    #: Why this template makes no state templates (`NO_STATE_TEMPLATES`, `NO_STATE_TEMPLATES_ISOLATED`), or None.
    states_refused: str | None
    _claims: int
    _spares: list[Any]
    _forked: Any
    _run_dir: Path | None
    _pidfd: int | None

    def state(self, digest: str) -> Self:
        """The state template of a snapshot: a child of this template that loaded it once (kept, the least
        recently used of `STATE_TEMPLATES` going first).

        Raises:
            SnapshotError: No such snapshot, or one of another kernel environment.
            SnapshotCorruptError: Its bytes do not hash to its digest, or it did not load.
            TemplateGoneError: This template is gone.
        """
        with self._lock:
            state = self._states.get(digest)
            if state is not None and state.is_alive():
                self._states.move_to_end(digest)
                return state
            if state is not None:
                state.close()
            state = self._derive(digest)
            self._states[digest] = state
            while len(self._states) > STATE_TEMPLATES:
                _, oldest = self._states.popitem(last=False)
                self._retired.append(oldest)
            # a state template goes once no copy of it is in use (its copies die with it)
            for retired in [t for t in self._retired if not t.in_use()]:
                self._retired.remove(retired)
                retired.close()
            return state

    def worth_forking(self, digest: str) -> bool:
        """Whether a copy of ``digest``'s state is better forked than restored into a kernel at hand: only
        where its state template exists already (loading one costs what a restore costs, and a fork adds the
        kernel's own start; a state copied by several kernels at once, a GRPO group's, has its template made
        by the first of them, which has no kernel at hand)."""
        if self.states_refused is not None:  # no state templates: the copy at hand restores
            return False
        with self._lock:
            state = self._states.get(digest)
            return state is not None and state.is_alive()

    @contextlib.contextmanager
    def claim(self, digest: str) -> Iterator[Self]:
        """The state template of ``digest`` (see `state`), counted in use until the block ends, so the
        copies the caller forks in the block are not lost with it: without the claim, another thread's
        `state` could push it out of the cache and close it (taking its copies along) between its
        creation and the first copy's start, when no copy of it is open yet."""
        with self._lock:
            state = self.state(digest)
            state._claims += 1
        try:
            yield state
        finally:
            with self._lock:
                state._claims -= 1

    def live_states(self) -> int:
        """How many of this template's state templates run (kept or retired, a snapshot loaded each)."""
        with self._lock:
            held = [*self._states.values(), *self._retired]
        return sum(1 for state in held if state.is_alive())

    def in_use(self) -> bool:
        """Whether a kernel forked from this template, other than its spares, is still open (or a caller is
        forking one: see [`claim`][themisto_env.sandbox.KernelTemplate.claim])."""
        with self._lock:
            if self._claims:
                return True
            spares = {id(kernel) for kernel in self._spares}
            return any(kernel.is_alive() for kernel in list(self._forked) if id(kernel) not in spares)

    def _derive(self, digest: str) -> Self:
        if self.states_refused is not None:
            raise KernelStartError(self.states_refused)
        path = self.store.path(digest)
        if not path.exists():
            raise SnapshotError(f"no snapshot {digest[:12]} in {self.store.root}")
        self.store.check_environment(digest, self.environment)
        folder = Path(tempfile.mkdtemp(prefix="state-", dir=self.run_dir))
        os.chmod(folder, 0o1777 if self._identities is None else 0o700)  # copies of their own uid: none of theirs
        handed = folder / f"{digest}.dill"
        if self.store_access == "copy":
            shutil.copyfile(path, handed)
        state = type(self)(self.spec, reseed=self.reseed, spares=self.spares)
        state.digest, state.base, state._run_dir = digest, self, folder
        state.socket_path = folder / "template.sock"
        answer = self.request(
            {
                "op": "derive",
                "snapshot": str(handed if self.store_access == "copy" else path),
                "digest": digest,
                "socket": str(state.socket_path),
                "log": str(folder / "template.log"),
            }
        )
        if "pidfd" not in answer:
            raise SnapshotError(f"the kernel template could not load snapshot {digest[:12]}: {answer.get('error')}")
        state._pidfd = answer["pidfd"]
        try:
            state._wait_loaded()
        except BaseException:
            state.close()
            raise
        finally:
            handed.unlink(missing_ok=True)
        return state

    def _wait_loaded(self) -> None:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            try:
                answer = self.request({"op": "status"}, timeout_s=REQUEST_TIMEOUT_S)
                break
            except TemplateGoneError:
                if not self.is_alive() or time.monotonic() > deadline:
                    raise SnapshotError(
                        f"the state template of {str(self.digest)[:12]} ended while loading it"
                    ) from None
                time.sleep(0.005)
        if not answer.get("ok"):
            error = str(answer.get("error"))
            kind = SnapshotCorruptError if "does not match" in error or "not a namespace" in error else SnapshotError
            raise kind(f"snapshot {str(self.digest)[:12]} did not load in the kernel template: {error}")
        self.hazards = list(answer.get("hazards") or [])
        self.prebuild_error = note_prebuild(answer, f"the state template of {str(self.digest)[:12]}")

    def copies(self, digest: str | None, n: int, *, limits: SandboxLimits | None = None) -> list[KernelLike]:
        """``n`` started kernels in the state of snapshot ``digest`` (or empty, with None), forked.

        Each copy is a kernel of its own (its process, its run directory; closing one leaves the others);
        the snapshot is loaded once, into the state template, whatever ``n``. The copies' namespaces are
        equal to a restore's: same names, same values, same fingerprint.
        """
        kernels: list[KernelLike] = []
        restored = digest is not None and self.states_refused is not None  # each copy loads it itself
        with contextlib.ExitStack() as stack:
            source = self if digest is None or restored else stack.enter_context(self.claim(digest))
            stack.enter_context(source.expecting(n))  # forked ahead, FILLERS at a time, while the first starts
            try:
                for _ in range(n):
                    kernels.append(source.kernel(limits=limits))
                    if restored:
                        kernels[-1].snapshots.restore(str(digest))
            except BaseException:
                for kernel in kernels:
                    kernel.close(graceful=False)
                raise
        return kernels
