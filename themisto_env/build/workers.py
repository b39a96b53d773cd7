"""Where a build's sessions are replayed: one kernel in this thread, or N kernels on N threads at once.

A session is a sequence: one worker replays it whole, in its own kernel. Workers take the next session
from one queue as they become free (hand them out longest first: the last to finish is then a short
one). A kernel is a separate process, so threads suffice: the thread mostly waits for its kernel, and N
kernels keep N cores busy. Each thread starts, uses and closes its own kernel.

What the workers make goes to a `ReplaySink` (the build: it appends each trajectory to the
dataset as it finishes and counts progress), called under one lock. The first error a worker raises
(a kernel that cannot start, a full disk) stops the others after their current execution and is raised
here once every kernel is closed; so is an interrupt (Ctrl-C).

`themisto_env.build.ray_workers` does the same on Ray actors across a cluster.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from themisto_env.sandbox.kernel.contract import KernelLike

if TYPE_CHECKING:
    from themisto_env.build.session_replay import WorkFolder
    from themisto_env.data.sessions import Session
    from themisto_env.data.trajectory import Trajectory


@dataclass(frozen=True)
class ReplayJob:
    """One session to replay.

    Attributes:
        position: Its place among the build's sessions (source order).
        session: The session.
        work: The files its kernel starts with.
    """

    position: int
    session: Session
    work: WorkFolder

    @property
    def executions(self) -> int:
        """How many executions it replays."""
        return len(self.session.executions)


class ReplaySink(Protocol):
    """What workers report to (called under one lock, from any worker's thread)."""

    def started(self, packages: dict[str, str]) -> None:
        """A worker's kernel is ready; ``packages``: the build's package versions, as that kernel has them."""

    def step(self, job: ReplayJob) -> None:
        """One execution of ``job`` was replayed."""

    def finished(self, job: ReplayJob, trajectory: Trajectory) -> None:
        """A session was replayed (whole, or cut short by its kernel's death: ``trajectory.complete``); its
        executions not yet counted by `step` are done too."""

    def lost(self, job: ReplayJob, why: str) -> None:
        """A session could not be replayed (its worker was lost): nothing of it was kept."""

    def retried(self, job: ReplayJob, why: str) -> None:
        """A session's worker was lost: nothing of it was kept, it goes to another worker."""


Replay = Callable[[KernelLike, ReplayJob, Callable[[], None]], "Trajectory"]
"""Replays a job in a kernel, calling its third argument after each execution."""


class _Stopped(Exception):
    """Raised inside a worker to stop it after its current execution."""


def replay_here(
    jobs: Sequence[ReplayJob],
    start_kernel: Callable[[], AbstractContextManager[KernelLike]],
    replay: Replay,
    sink: ReplaySink,
    packages: Sequence[str],
) -> None:
    """Replay the jobs one after another in one kernel, in this thread (``--workers 1``).

    Args:
        jobs: The sessions, in the order to replay them.
        start_kernel: Makes the worker's kernel (a context manager that starts and closes it).
        replay: Replays one job in a kernel.
        sink: Where kernels, executions and trajectories are reported.
        packages: The distributions whose versions each kernel reports when it is ready.
    """
    with start_kernel() as kernel:
        sink.started(kernel.introspect.package_versions(packages))
        for job in jobs:
            sink.finished(job, replay(kernel, job, lambda job=job: sink.step(job)))


def replay_on_threads(
    jobs: Sequence[ReplayJob],
    workers: int,
    start_kernel: Callable[[], AbstractContextManager[KernelLike]],
    replay: Replay,
    sink: ReplaySink,
    packages: Sequence[str],
) -> None:
    """Replay the jobs on ``workers`` threads, each with its own kernel, taking jobs in the order given.

    Args:
        jobs: The sessions, in the order to hand them out (longest first balances best).
        workers: How many kernels at once (no more are started than there are jobs, at least one).
        start_kernel: Makes a worker's kernel (a context manager that starts and closes it).
        replay: Replays one job in a kernel.
        sink: Where kernels, executions and trajectories are reported (called under one lock).
        packages: The distributions whose versions each kernel reports when it is ready.

    Raises:
        BaseException: The first error of any worker (a kernel that did not start, a full disk, ...),
            once every worker has stopped and closed its kernel; a ``KeyboardInterrupt`` the same way.
    """
    todo: queue.SimpleQueue[ReplayJob] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def step(job: ReplayJob) -> None:
        if stop.is_set():
            raise _Stopped
        with lock:
            sink.step(job)

    def work() -> None:
        try:
            with start_kernel() as kernel:
                versions = kernel.introspect.package_versions(packages)
                with lock:
                    sink.started(versions)
                while not stop.is_set():
                    try:
                        job = todo.get_nowait()
                    except queue.Empty:
                        return
                    trajectory = replay(kernel, job, lambda job=job: step(job))
                    with lock:
                        sink.finished(job, trajectory)
        except _Stopped:
            pass
        except BaseException as exc:  # raised again in the calling thread
            with lock:
                errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=work, name=f"themisto-build-{i}", daemon=True)
        for i in range(max(1, min(workers, len(jobs))))
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # Ctrl-C: the workers stop after their current execution and close their kernels
        stop.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]


__all__ = ["Replay", "ReplayJob", "ReplaySink", "replay_here", "replay_on_threads"]
