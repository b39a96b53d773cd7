"""The replay and restore routes: `TrajectoryKernel` brings a kernel to the state before a step of a
trajectory and checks it against the fingerprint (and working folder) recorded at build time.

Cheapest route first: *forward* (replay the recorded cells in between, when the kernel is before an earlier
step of the same trajectory and they cost less than a restore), then *snapshot* (restore, or fork, the
nearest trusted snapshot and replay after it), then *snapshot* from a fresh kernel. A state that still
differs is reported (``check == "mismatch"``), never served as verified; an infrastructure failure is
recorded in the report's ``faults`` and the route retried on a fresh kernel (`MAX_RECOVERIES`). Code that
is not a recorded cell taints the kernel (`TrajectoryKernel.taint`): the next serve starts fresh.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from themisto_env import tracing
from themisto_env.data.trajectory import Step, Trajectory
from themisto_env.errors import (
    BackendUnavailableError,
    InfrastructureError,
    SnapshotCorruptError,
    SnapshotError,
)
from themisto_env.replay.recorded_cells import replay_step
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.pool import KernelPool
from themisto_env.sandbox.store.workdir import FolderTooLargeError, diff_trees, tree_digest
from themisto_env.state.check import (
    StateReport,
    diff_fingerprints,
    expected_fingerprint,
    files_before,
    fresh_before,
)
from themisto_env.state.fork import ForkedStates

if TYPE_CHECKING:
    from themisto_env.sandbox.template.core import KernelTemplate


#: How often `TrajectoryKernel.serve` retries the snapshot route after an infrastructure failure.
MAX_RECOVERIES = 2
#: Cost model of a restore (measured on the bundled data: a round trip plus dill's load speed).
RESTORE_S = 0.01
RESTORE_BYTES_PER_S = 200e6


class TrajectoryKernel(ForkedStates):
    """A kernel that can be put in the state before any step of any trajectory, and checked there.

    Args:
        new_kernel: Makes a new, unstarted kernel (called again when one cannot be restarted).
        pool: Where started kernels come from instead, if given; a fresh kernel is then a new pooled
            one (the pool is the caller's: `close` closes only the kernel
            this owner holds).
    """

    def __init__(
        self,
        new_kernel: Callable[[], KernelLike],
        *,
        pool: KernelPool | None = None,
        template: Callable[[], KernelTemplate] | None = None,
    ) -> None:
        self._new_kernel = new_kernel
        #: Where kernels come from when set (may be set or cleared between serves).
        self.pool = pool
        #: Gives the template kernels are forked from, and states copied from (see `_fork_state`);
        #: None, or a template that cannot start or is not safe to fork: kernels are started and restored.
        self.template = template
        self._forking_refused: str | None = None  # why the template was given up (said once)
        #: Why kernels are not forked here at all (said in the state report), where the caller knows.
        self.not_forked: str | None = None
        self._kernel: KernelLike | None = None
        self._closing: list[threading.Thread] = []  # replaced kernels being closed in the background
        #: (trajectory id, step) the kernel is before, when known; None after anything unrecorded ran.
        self.position: tuple[str, int] | None = None
        self._tainted = False
        self._fresh = False  # the kernel was just started or restarted: nothing ran in it yet
        #: Snapshots this kernel could not load (a missing package, ...): not tried again.
        self.unloadable: set[str] = set()
        self._report: StateReport | None = None  # of the serve under way
        self._copied_by: str | None = None  # how the serve under way copied a snapshot in: fork or restore

    @property
    def kernel(self) -> KernelLike:
        """The kernel (started on first use)."""
        if self._kernel is None:
            template = self._template()
            if template is not None:
                self._kernel = template.kernel()
            else:
                self._kernel = self.pool.take() if self.pool is not None else self._new_kernel().start()
            self.position = None
            self._fresh = True
        return self._kernel

    @property
    def started(self) -> bool:
        """Whether this owner holds a kernel now (it starts one on first use of
        `kernel`)."""
        return self._kernel is not None

    def close(self, *, graceful: bool = True) -> None:
        """Stop the kernel (see [`KernelLike.close`][themisto_env.sandbox.KernelLike.close]) and wait for replaced ones
        to be gone. Idempotent."""
        if self._kernel is not None:
            self._kernel.close(graceful=graceful)
            self._kernel = None
        self.position = None
        for thread in self._closing:
            thread.join(timeout=60)
        self._closing = []

    def taint(self) -> None:
        """Unrecorded code ran in the kernel: the next `serve` starts from
        a fresh kernel."""
        self._tainted = True
        self.position = None

    # -- serving a state -------------------------------------------------------------------------------

    def serve(self, trajectory: Trajectory, step: int) -> StateReport:
        """Bring the kernel to the state before ``step`` of ``trajectory`` and check it (traced as a
        ``themisto.state.serve`` span: its route, check and faults).

        Raises:
            BackendUnavailableError: The backend itself is gone (the Docker engine is not reachable).
            InfrastructureError: The state could not be reached even after restarting the kernel
                (the message lists each failure).
        """
        where = {"themisto.trajectory.id": trajectory.id, "themisto.step": step}
        with tracing.span("themisto.state.serve", where, timed="state") as span:
            self._copied_by = None
            report = self._serve(trajectory, step)
            route = report.route.split(" (")[0].split(" + ")[0]  # forward, in place, fresh, snapshot after step N
            tracing.record(
                span,
                {
                    "themisto.state.route": (self._copied_by or "restore") if route.startswith("snapshot") else route,
                    "themisto.state.path": report.route,
                    "themisto.state.check": report.check,
                    "themisto.state.faults": len(report.faults),
                },
            )
            if report.faults:  # met and recovered from: still faults to see
                tracing.fail(span, "; ".join(report.faults))
            return report

    def _serve(self, trajectory: Trajectory, step: int) -> StateReport:
        report = self._report = StateReport(trajectory.id, step)
        why = self._forking_refused or self.not_forked
        template = self._template()
        if template is None:
            report.served_by = "restore" + (f" ({why})" if why else "")
        elif (refused := getattr(template, "states_refused", None)) is not None:  # forked, then restored into
            report.served_by = f"restore (into a forked copy: {refused})"
        else:
            report.served_by = "fork"
        expected = expected_fingerprint(trajectory, step)
        forward = self._forward_from(trajectory, step)
        self.position = None  # known again only once this state is reached
        # Cheapest first; each later route repairs what the one before could not: a divergent forward
        # replay, then module state a snapshot does not hold (display options from another state).
        plan = [*(["forward"] if forward is not None else []), "snapshot", "fresh snapshot"]
        index = 0
        while True:
            route = plan[index]
            started_fresh = self._fresh or self._tainted
            try:
                if self._tainted:
                    self._fresh_kernel()
                if route == "forward":
                    assert forward is not None
                    report.route, live = self._forward(trajectory, forward, step, check=expected is not None)
                else:
                    if route == "fresh snapshot" and not self._fresh:
                        self._restart()
                    report.route, live = self._by_snapshot(trajectory, step, check=expected is not None)
                self.position = (trajectory.id, step)
                if expected is None:
                    report.check = "unchecked"
                    return report
                if live is None:  # the route did not end with a fingerprinted request
                    live = self.kernel.introspect.fingerprint()
                report.differences = diff_fingerprints(expected, live) + self._file_differences(trajectory, step)
            except BackendUnavailableError:  # no engine: nothing to retry here; the caller stops
                self.position = None
                raise
            except InfrastructureError as exc:
                self.position = None
                report.faults.append(f"{type(exc).__name__}: {exc}")
                if len(report.faults) > MAX_RECOVERIES:
                    raise InfrastructureError(
                        f"could not reach the state before step {step} of {trajectory.id}: " + "; ".join(report.faults)
                    ) from exc
                self._fresh_kernel()  # the retry starts from a fresh kernel
                index = plan.index("fresh snapshot")
                continue
            if not report.differences:
                report.check = "verified"
                return report
            if route == "fresh snapshot" or (route == "snapshot" and started_fresh):
                report.check = "mismatch"
                return report
            self.position = None
            index = plan.index(route) + 1

    def _set_files(self, trajectory: Trajectory, step: int) -> None:
        """Give the kernel's working folder the files it held before ``step`` when built (nothing where
        they were not recorded).

        Raises:
            DataError: The dataset's files are missing or do not match their digests.
        """
        digest, store = files_before(trajectory, step), trajectory.files_store
        if digest is not None and store is not None:
            self.kernel.snapshots.set_files(store.tree(digest), store)

    def _file_differences(self, trajectory: Trajectory, step: int) -> list[str]:
        """Where the kernel's working folder differs from the one ``step`` started in when built."""
        if trajectory.workdir_digest is None:  # built before working folders were recorded
            return []
        digest, store = files_before(trajectory, step), trajectory.files_store
        if digest is None:
            return ["files: not recorded before this step (the working folder exceeded the limit when built)"]
        if store is None:
            return ["files: unknown (the trajectory was not read from a dataset folder)"]
        try:
            live = self.kernel.snapshots.files()
        except FolderTooLargeError as exc:
            return [f"files: {exc}"]
        return [] if tree_digest(live) == digest else diff_trees(store.tree(digest), live)

    def _fresh_kernel(self) -> None:
        """Restart the kernel; when even that fails, replace it."""
        self._tainted = False
        self.position = None
        if self._kernel is None:
            return
        try:
            self._restart()
        except BackendUnavailableError:
            raise
        except InfrastructureError:
            with contextlib.suppress(Exception):
                self._kernel.close()
            self._kernel = None

    def _restart(self) -> None:
        """A fresh kernel: the next pooled one (the current one closed in the background), else a restart."""
        if (self.pool is not None or self._template() is not None) and self._kernel is not None:
            old, self._kernel = self._kernel, None
            self._discard(old)
            self.kernel  # noqa: B018 - forks one from the template, or takes the next pooled one
        else:
            self.kernel.restart()
        self._fresh = True

    def _discard(self, kernel: KernelLike) -> None:
        thread = threading.Thread(target=kernel.close, kwargs={"graceful": False}, name="themisto-discard", daemon=True)
        self._closing = [t for t in self._closing if t.is_alive()] + [thread]
        thread.start()

    def _replay(self, step: Step, *, fingerprint: bool) -> dict[str, str] | None:
        self._fresh = False
        return replay_step(self.kernel, step, fingerprint=fingerprint).fingerprint

    def _forward_from(self, trajectory: Trajectory, step: int) -> int | None:
        """The position to replay forward from: the kernel is before an earlier step of the same
        trajectory and replaying the cells in between is expected to cost less than the snapshot route
        (by the recorded execution times, and a restore estimated from the snapshot's size)."""
        if self._tainted or self.position is None or self.position[0] != trajectory.id:
            return None
        position = self.position[1]
        if position > step:
            return None
        steps = trajectory.steps
        forward_cost = sum(s.duration_s for s in steps[position:step])
        base = self._nearest_snapshot(trajectory, step)
        if base is None or base < position:
            return position
        digest = steps[base].snapshot
        assert digest is not None
        try:
            size = self.kernel.store.path(digest).stat().st_size
        except OSError:
            return position
        snapshot_cost = RESTORE_S + size / RESTORE_BYTES_PER_S + sum(s.duration_s for s in steps[base + 1 : step])
        return position if forward_cost <= snapshot_cost else None

    def _nearest_snapshot(self, trajectory: Trajectory, step: int) -> int | None:
        """The last step before ``step`` (back to a restart) whose trusted snapshot holds the whole namespace."""
        steps = trajectory.steps
        for j in range(step - 1, -1, -1):
            if self._usable(steps[j].snapshot) and not steps[j].snapshot_skipped:
                return j
            if fresh_before(trajectory, j):
                return None
        return None

    def _forward(
        self, trajectory: Trajectory, start: int, step: int, *, check: bool
    ) -> tuple[str, dict[str, str] | None]:
        """Replay the cells from ``start`` to ``step``; return the route and (with ``check``) the
        fingerprint after it, taken with the last cell."""
        return ("in place" if step == start else f"forward ({step - start} cells)"), self._replay_range(
            trajectory, start, step, check=check
        )

    def _replay_range(self, trajectory: Trajectory, first: int, step: int, *, check: bool) -> dict[str, str] | None:
        """Replay steps ``first`` .. ``step - 1`` from the state before ``first``, restarting where the
        recording did; return the fingerprint after the last one (None if not taken)."""
        live = None
        for s in trajectory.steps[first:step]:
            if s.index > first and fresh_before(trajectory, s.index):
                self._restart()
                self._set_files(trajectory, s.index)  # a pooled fresh kernel starts in an empty folder
                live = None
            if s.wedged:  # it wedged the kernel when built: the state after it is a fresh kernel
                continue
            live = self._replay(s, fingerprint=check and s.index == step - 1)
        if step > first and fresh_before(trajectory, step):
            self._restart()
            self._set_files(trajectory, step)
            live = None
        return live

    def _usable(self, digest: str | None) -> bool:
        if digest is None or digest in self.unloadable:
            return False
        # the template's store and environment where states are forked: no kernel needed to know them
        source = self._kernel or self._template() or self.kernel
        store = source.store
        if digest not in store:
            return False
        if store.refusal(digest, source.environment) is not None:
            # Written by a kernel of another environment (other packages): never restored here; the
            # kernel would refuse it too (the store's SnapshotEnvironmentError). The state is replayed instead.
            if self._report is not None and digest not in self._report.refused_snapshots:
                self._report.refused_snapshots.append(digest)
            return False
        return True

    def _restore(self, digest: str, keep: list[str] | None = None) -> dict[str, str] | None:
        """Restore a snapshot; return the fingerprint after it, or None when it cannot be loaded: a
        corrupt snapshot is set aside (renamed ``*.corrupt``), and either kind is not tried again by this
        owner. A failure of the kernel itself propagates (the route is retried on a fresh kernel)."""
        self._fresh = False
        restore = tracing.span("themisto.state.restore", {"themisto.snapshot.digest": digest})
        try:
            with restore as span:
                if span.is_recording():  # the store as _usable found it
                    store = (self._kernel or self._template() or self.kernel).store
                    with contextlib.suppress(OSError):
                        span.set_attribute("themisto.snapshot.bytes", store.path(digest).stat().st_size)
                if not keep:  # a copy of the state template (names kept from the kernel need that kernel)
                    forked = self._fork_state(digest)
                    if forked is not None:
                        self._copied_by = "fork"
                        tracing.record(span, {"themisto.state.copied_by": "fork"})
                        return forked
                restored = self.kernel.snapshots.restore(digest, clean=True, keep=keep or ()).fingerprint
                self._copied_by = "restore"
                tracing.record(span, {"themisto.state.copied_by": "restore"})
                return restored
        except SnapshotCorruptError:
            self.unloadable.add(digest)
            path = self.kernel.store.path(digest)
            with contextlib.suppress(OSError):
                path.replace(path.with_name(path.name + ".corrupt"))
        except SnapshotError:
            self.unloadable.add(digest)
        return None

    def _by_snapshot(self, trajectory: Trajectory, step: int, *, check: bool) -> tuple[str, dict[str, str] | None]:
        """Restore the nearest trusted snapshot and replay after it; return the route and the
        fingerprint after it. The kernel is not restarted (a restore into a warm kernel is fast): module
        state a snapshot does not hold survives, and where it shows (display options, in the
        fingerprint) `serve` repeats the route from a fresh kernel."""
        steps = trajectory.steps
        if fresh_before(trajectory, step):
            if not self._fresh:
                self._restart()
            self._set_files(trajectory, step)
            return "fresh", None
        while True:  # a snapshot found corrupt or unloadable is dropped and the route planned again
            found = self._nearest_snapshot(trajectory, step)
            j = step - 1  # without a snapshot: back to the last fresh start
            while found is None and not fresh_before(trajectory, j):
                j -= 1
            live = None
            if found is not None:
                digest = steps[found].snapshot
                assert digest is not None
                live = self._restore(digest)
                if live is None:
                    continue
                self._set_files(trajectory, found + 1)
                first, route = found + 1, f"snapshot after step {found}"
            else:
                if not self._fresh:
                    self._restart()
                self._set_files(trajectory, j)
                first, route = j, "fresh"
            if step > first:
                live = self._replay_range(trajectory, first, step, check=check)
                route += f" + {step - first} cells"
                last = steps[step - 1]
                if last.snapshot_skipped and self._usable(last.snapshot):
                    assert last.snapshot is not None
                    keep = sorted(last.snapshot_skipped)
                    live = self._restore(last.snapshot, keep=keep)  # None (so taken again) if it failed
                    if live is not None:
                        route += f" + snapshot after step {step - 1} keeping {', '.join(keep)}"
            return route, live


__all__ = ["MAX_RECOVERIES", "TrajectoryKernel"]
