"""Disposable copies: model-written code (a prediction under the execution score, a ``try_cell``
candidate) runs in a kernel of its own, brought to a sample's state and discarded after one run.

The copy never sees the snapshot store (each snapshot is copied in). Before the code runs, the measuring
side is sealed (a private copy of the in-kernel helper behind a random token); after it, the names whose
fingerprint changed are measured beside *canary* names the code could not know, so a measurement the code
froze or broke is caught (``tampered``, ``unreadable``). Limit hits are read from outside the kernel where
the backend can. A failure while reaching the state is the machinery's
([`InfrastructureError`][themisto_env.errors.InfrastructureError]); one during or after the code is the
code's own (``failure``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Unpack, get_args

from themisto_env.data.trajectory import Trajectory
from themisto_env.errors import (
    BackendUnavailableError,
    HelperError,
    InfrastructureError,
    KernelDiedError,
)
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.forked import shared_fault
from themisto_env.sandbox.kernel.helper import value_fingerprint
from themisto_env.sandbox.kernel.pool import KernelPool
from themisto_env.sandbox.kernel.spec import KernelFields, KernelSpec
from themisto_env.sandbox.template.shared import hold_shared_templates, release_shared_templates, template_source
from themisto_env.state.check import diff_fingerprints, expected_fingerprint
from themisto_env.state.kernel import TrajectoryKernel
from themisto_env.syntax import parse as parse_python

#: Why a piece of model-written code failed, when it was its own doing.
Failure = Literal["exit", "memory", "processes", "timeout", "unreadable", "tampered"]
FAILURES: tuple[Failure, ...] = get_args(Failure)

#: The fingerprint entry of a name that code deleted.
DELETED = "<deleted>||"
#: How many pieces of code of one group `DisposableKernels.run_many` runs at once (the cores, at most 2).
WORKERS = max(1, min(2, os.cpu_count() or 1))


class _MaybeAnothers(InfrastructureError):
    """A run's kernel died together with the template it was forked from, beside other runs: the template's
    death may be another run's doing (on a backend whose copies can signal it), so the run is not judged."""


def changed_names(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Names whose fingerprint differs between two states, with their new fingerprint (``<deleted>||``
    for a name that went)."""
    names = set(before) | set(after)
    return {
        name: after.get(name, DELETED)
        for name in names
        if name not in before or name not in after or diff_fingerprints({name: before[name]}, {name: after[name]})
    }


def imported_modules(trajectories: Iterable[Trajectory], *, submodules: bool = False) -> list[str]:
    """The top-level modules the trajectories' cells import (to preload in pooled kernels); with
    ``submodules``, the modules as imported (``sklearn.ensemble`` rather than ``sklearn``)."""
    found: set[str] = set()
    for trajectory in trajectories:
        for step in trajectory.steps:
            found.update(_imports(step.source, submodules))
    return sorted(found)


@functools.lru_cache(maxsize=65536)
def _imports(source: str, submodules: bool) -> frozenset[str]:
    """The modules one cell imports (cached: every env of a process reads the same cells)."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return frozenset()  # IPython magics and the like
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name if submodules else alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module if submodules else node.module.partition(".")[0])
    return frozenset(found)


@dataclass
class CodeRun:
    """What a piece of model-written code did in a disposable kernel in a sample's state.

    Attributes:
        status: ``ok``, ``error`` (it raised) or ``failed`` (see ``failure``).
        outputs: nbformat outputs the kernel's protocol carried for the code's request.
        changed: Names whose fingerprint the code changed (created, rebound, mutated, deleted), with
            their new fingerprint; None when they could not be measured (a failure).
        failure: Why the code failed, when it was its own doing: one of `FAILURES`.
        detail: What the failure looked like (for logs).
        seconds: Wall time of the whole run (serving the state, the code, the measurement).
    """

    status: Literal["ok", "error", "failed"]
    outputs: list[dict[str, Any]] = field(default_factory=list)
    changed: dict[str, str] | None = None
    failure: Failure | None = None
    detail: str = ""
    seconds: float = 0.0


def _canary() -> dict[str, object]:
    """Fresh names with random values, planted after the code ran (it cannot know or keep them)."""
    tag = secrets.token_hex(6)
    return {f"canary_{tag}_text": secrets.token_hex(16), f"canary_{tag}_number": secrets.randbits(48)}


class _LimitWatch:
    """Reads the kernel's limit hits from outside (the container's cgroup) while code runs, and keeps
    what it saw beyond what was there before the code started: a container killed at a limit takes its
    cgroup along, so reading only afterwards could find nothing."""

    def __init__(self, kernel: KernelLike, interval_s: float = 0.1) -> None:
        self.kernel = kernel
        self.interval_s = interval_s
        self.baseline: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="themisto-limit-watch", daemon=True)

    def __enter__(self) -> _LimitWatch:
        if self.kernel.launcher.enforces_limits:  # elsewhere there are no limit hits to read
            with contextlib.suppress(Exception):
                self.baseline = dict(self.kernel.launcher.limit_events())
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self._read()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the cgroup may be gone with the container
            for key, value in self.kernel.launcher.limit_events().items():
                self.seen[key] = max(value - self.baseline.get(key, 0), self.seen.get(key, 0))

    def hit(self, *, ran: bool = False) -> tuple[Failure, str] | None:
        """The limit the code hit, if any. A fork bomb also exhausts memory (each fork copies the
        kernel's pages as it runs): the process limit, when hit, is named first. A forked copy's data
        size near its allowance (``data_limit``, inferred) names a failure only where the code did not run
        to its end (``ran``): a large but legal allocation comes near too.

        Raises:
            InfrastructureError: The container a forked copy shares with others ran out meanwhile, not the
                copy (`shared_fault`): the run is not the code's to answer for.
        """
        if self._thread.is_alive():
            self._read()  # the latest counts: the kernel may be seen dead before the next poll
        if (fault := shared_fault(self.seen)) is not None:
            raise InfrastructureError(fault)
        if self.seen.get("pids_max"):
            return "processes", f"the process limit was hit {self.seen['pids_max']} time(s)"
        if self.seen.get("oom_kill"):
            return "memory", f"out of memory ({self.seen['oom_kill']} process(es) killed at the memory limit)"
        if self.seen.get("data_limit") and not ran:
            return "memory", "out of memory (its data reached the copy's memory allowance)"
        return None

    def failed(self, failure: Failure, detail: str, *, outputs: list[dict[str, Any]] | None = None) -> CodeRun:
        """A failure of the code, named by the limit it hit where the backend saw one (its own records,
        never what the code printed)."""
        limit = self.hit()
        if limit is not None:
            failure, detail = limit
        elif failure == "exit":
            with contextlib.suppress(Exception):
                if self.kernel.launcher.out_of_memory():
                    failure, detail = "memory", "killed at the memory limit"
        return CodeRun("failed", outputs or [], failure=failure, detail=detail)


def _died(
    kernel: KernelLike,
    exc: KernelDiedError,
    limits: _LimitWatch,
    *,
    alone: bool,
    outputs: list[dict[str, Any]] | None = None,
) -> CodeRun:
    """The code's kernel died: its own doing once the backend is known to be alive and, beside other runs (not
    ``alone``), the template it was forked from too (else `_MaybeAnothers`)."""
    kernel.launcher.check_backend()
    template = getattr(kernel.launcher, "template", None)
    if not alone and template is not None and not template.is_alive():
        raise _MaybeAnothers(f"the kernel died with its template: {exc}") from exc
    return limits.failed("exit", str(exc), outputs=outputs)


class DisposableKernels:
    """Runs model-written code in throw-away kernels in a trajectory's states.

    Args:
        spec: The kind of kernel (a `KernelSpec`, or a backend's name; use ``docker`` for code you do not
            trust), always with ``store_access="copy"`` (the states are copied in, the store never
            mounted): its limits are each kernel's (the code's timeout is passed to
            `run`), its preloads are imported ahead of time, and its fork policy (`KernelSpec.not_forked`)
            whether each is a copy of the state's template (no kernel start, no restore: the process's shared
            template of the spec) or is started and restored.
        pool_size: How many kernels to keep started ahead of time (where they are not forked).
        **fields: The spec's fields to set or replace (`KernelFields`).
    """

    def __init__(self, spec: KernelSpec | str, *, pool_size: int = 1, **fields: Unpack[KernelFields]) -> None:
        self.spec = KernelSpec.of(spec, **fields).with_access("copy")
        self.template = template_source(self.spec)
        self._holds_templates = self.template is not None
        if self._holds_templates:  # the shared template (a container on docker) lives while a holder forks
            hold_shared_templates()
        self.pool = KernelPool(functools.partial(Kernel, self.spec), size=pool_size, preload=self.spec.preload)
        self._closing: list[threading.Thread] = []
        self._closing_lock = threading.Lock()
        self._closed = False
        #: The kernel running model-written code right now (for tests and monitors; the last one started where
        #: `run_many` runs several at once), else None.
        self.running: KernelLike | None = None

    def run(self, trajectory: Trajectory, step: int, code: str, *, timeout_s: float) -> CodeRun:
        """Run ``code`` as a cell in a fresh kernel in the state before ``step``; measure what it did.

        Raises:
            BackendUnavailableError: The backend is gone.
            InfrastructureError: The kernel could not be brought to the state (nothing model-written ran), or
                the container a forked copy shares with others ran out while the code ran.
        """
        return self._run(trajectory, step, code, timeout_s=timeout_s, alone=True)

    def run_many(
        self, trajectory: Trajectory, step: int, codes: Sequence[str], *, timeout_s: float
    ) -> list[CodeRun | InfrastructureError]:
        """Run each piece of code as `run` does, each in a kernel
        of its own in the state before ``step`` (a GRPO group's completions of one sample), and return what
        each did, in order, or the machinery's failure that left it unjudged.

        The copies are announced to the state's template first, which forks them ahead as spares while the
        first ones run, and `WORKERS` pieces run at once. Each still runs in a fresh kernel and scores as it
        would alone: a run that met a failure of the machinery (its kernel gone with its template, which
        another run's code may have killed; a container that copies share running out) is run again once
        the others are done, alone, and judged by that run.

        Raises:
            BackendUnavailableError: The backend is gone.
        """
        with contextlib.ExitStack() as stack:
            busy = sum(1 for code in codes if code.strip())
            source = TrajectoryKernel(self.pool.take, template=self.template).copy_source(trajectory, step)
            if source is not None and busy > 1:
                with contextlib.suppress(InfrastructureError):  # the runs meet it again, and say it
                    state = stack.enter_context(source[0].claim(source[1]))
                    stack.enter_context(state.expecting(busy))

            def attempt(code: str) -> CodeRun | InfrastructureError:
                try:
                    return self._run(trajectory, step, code, timeout_s=timeout_s, alone=False)
                except BackendUnavailableError:
                    raise
                except InfrastructureError as exc:
                    return exc

            with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="themisto-run") as workers:
                results = list(workers.map(attempt, codes))
        for index, result in enumerate(results):  # alone now: what happens is the code's own doing
            if isinstance(result, InfrastructureError):
                try:
                    results[index] = self._run(trajectory, step, codes[index], timeout_s=timeout_s, alone=True)
                except BackendUnavailableError:
                    raise
                except InfrastructureError as exc:
                    results[index] = exc
        return results

    def _run(self, trajectory: Trajectory, step: int, code: str, *, timeout_s: float, alone: bool) -> CodeRun:
        started = time.perf_counter()
        if not code.strip():  # an empty cell does nothing and prints nothing: no kernel needed
            return CodeRun("ok", [], changed={}, seconds=time.perf_counter() - started)
        served = TrajectoryKernel(self.pool.take, template=self.template)
        served.not_forked = self.spec.not_forked
        try:
            report = served.serve(trajectory, step)
            if report.check == "mismatch":
                raise InfrastructureError(
                    f"the disposable kernel's state before step {step} of {trajectory.id} differs from the "
                    f"recording: {'; '.join(report.differences[:5])}"
                )
            kernel = served.kernel
            before = expected_fingerprint(trajectory, step)
            if before is None:
                before = kernel.introspect.fingerprint()
            token = kernel.introspect.seal()  # a failure here is the machinery's: nothing model-written ran yet
            self.running = kernel
            run = self._run_code(kernel, code, token, before, timeout_s=timeout_s, alone=alone)
        finally:
            self.running = None
            self._discard(served)
        run.seconds = time.perf_counter() - started
        return run

    def _run_code(
        self, kernel: KernelLike, code: str, token: str, before: dict[str, str], *, timeout_s: float, alone: bool = True
    ) -> CodeRun:
        """The code's part: what goes wrong from here on is the code's doing, once the backend itself is
        known to be alive (a lost engine also looks like a dead or silent kernel), and, beside other runs
        (not ``alone``), once the kernel's template is known to be alive (`_MaybeAnothers`)."""
        with _LimitWatch(kernel) as limits:
            try:
                result = kernel.execute(code, timeout_s=timeout_s, interrupt=False)
            except BackendUnavailableError:
                raise
            except KernelDiedError as exc:
                return _died(kernel, exc, limits, alone=alone)
            except InfrastructureError as exc:
                kernel.launcher.check_backend()
                return limits.failed("unreadable", str(exc))
        if result.status == "timeout":
            kernel.launcher.check_backend()
            return limits.failed("timeout", f"it ran past {timeout_s:g} s", outputs=result.outputs)
        if (limit := limits.hit(ran=result.status == "ok")) is not None:  # hit, though the cell survived it
            return CodeRun("failed", result.outputs, failure=limit[0], detail=limit[1])
        canary = _canary()
        try:
            measured = kernel.introspect.sealed_fingerprint(token, canary)
        except BackendUnavailableError:
            raise
        except KernelDiedError as exc:
            return _died(kernel, exc, limits, alone=alone, outputs=result.outputs)
        except (InfrastructureError, HelperError) as exc:
            kernel.launcher.check_backend()
            return CodeRun("failed", result.outputs, failure="unreadable", detail=str(exc))
        wrong = [name for name, value in canary.items() if measured.pop(name, None) != value_fingerprint(value)]
        if wrong:
            return CodeRun(
                "failed", result.outputs, failure="tampered", detail=f"the measurement missed canaries {wrong}"
            )
        status: Literal["ok", "error"] = "error" if result.status == "error" else "ok"
        return CodeRun(status, result.outputs, changed=changed_names(before, measured))

    def _discard(self, served: TrajectoryKernel) -> None:
        """Close the kernel in the background (a container takes a moment to go)."""
        thread = threading.Thread(target=served.close, kwargs={"graceful": False}, name="themisto-discard", daemon=True)
        with self._closing_lock:  # started under the lock: another run's discard keeps only live threads
            self._closing = [t for t in self._closing if t.is_alive()] + [thread]
            thread.start()
            closed = self._closed
        if closed:  # close() has already waited for the others: this one is waited for here
            thread.join(timeout=60)

    def close(self) -> None:
        """Close the pool, wait for discarded kernels to be gone and give back this holder's share of the shared
        templates. Idempotent."""
        self.pool.close()
        with self._closing_lock:
            closing, self._closing, self._closed = self._closing, [], True
        for thread in closing:
            thread.join(timeout=60)
        if self._holds_templates:
            self._holds_templates = False
            release_shared_templates()
