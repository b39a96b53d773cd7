"""Where a build's time goes: the seconds each trajectory's replay spent taking snapshots and in second replays.

A build measures each session it replays (`measuring`): the replay's wall time and, inside it, the time of
every snapshot the kernel saved (`TimedKernel`) and of the second replays (`timed`, called by
`themisto_env.build.second_replay`). The figures go into the build's report, never into the dataset, and
cost one clock read per snapshot and step. Outside a measured replay `timed` does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from themisto_env.sandbox.kernel.contract import KernelLike, SnapshotsLike
from themisto_env.sandbox.models import SnapshotInfo

REPLAY = "replay"
"""The wall time of a session's replay (the others are parts of it)."""
SNAPSHOT = "snapshot"
"""Saving the namespace after a step (and after a restart)."""
SECOND_REPLAY = "second-replay"
"""Running cells again from the state before them, and putting the state back after."""
KEEP_STATE = "keep-state"
"""Keeping the process state before each step, so that a second replay can start from it."""
PARTS = (SNAPSHOT, SECOND_REPLAY, KEEP_STATE)

_seconds: ContextVar[dict[str, float] | None] = ContextVar("themisto_build_seconds", default=None)


@contextmanager
def measuring() -> Iterator[dict[str, float]]:
    """Measure a block (one session's replay, in this thread): the dict it gives fills with seconds per part
    and ``replay``, the block's wall time."""
    seconds: dict[str, float] = {}
    token = _seconds.set(seconds)
    started = time.perf_counter()
    try:
        yield seconds
    finally:
        seconds[REPLAY] = time.perf_counter() - started
        _seconds.reset(token)


@contextmanager
def timed(part: str) -> Iterator[None]:
    """Add a block's seconds to ``part`` of the replay being measured (nothing when none is)."""
    seconds = _seconds.get()
    if seconds is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - started


class _TimedSnapshots:
    """A kernel's snapshots whose ``save`` is timed; the rest is the kernel's own."""

    def __init__(self, snapshots: SnapshotsLike) -> None:
        self._snapshots = snapshots

    def save(self) -> SnapshotInfo:
        with timed(SNAPSHOT):
            return self._snapshots.save()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._snapshots, name)


class TimedKernel:
    """A kernel whose snapshot saves count for `SNAPSHOT`; everything else goes to the kernel itself.

    Args:
        kernel: The build worker's kernel.
    """

    def __init__(self, kernel: KernelLike) -> None:
        self._kernel = kernel
        self.snapshots = _TimedSnapshots(kernel.snapshots)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


def timing_summary(timings: Mapping[str, Mapping[str, float]], steps: Mapping[str, int]) -> dict[str, Any]:
    """A build's timing figures from its trajectories' (id -> seconds per part, `measuring`'s).

    Args:
        timings: Per trajectory replayed here, its seconds.
        steps: Per trajectory, its executions.

    Returns:
        ``replay_s`` (summed over trajectories: kernel-busy time, whatever the number of workers),
        ``executions``, ``executions_per_s_per_worker`` (executions over that time; None without any),
        and per part (``snapshot``, ``second_replay``, ``keep_state``) its seconds (``<part>_s``) and its
        ``<part>_share`` of the replay time.
    """
    replay = sum(t.get(REPLAY, 0.0) for t in timings.values())
    executions = sum(steps.get(tid, 0) for tid in timings)
    summary: dict[str, Any] = {
        "replay_s": round(replay, 2),
        "executions": executions,
        "executions_per_s_per_worker": round(executions / replay, 3) if replay > 0 else None,
    }
    for part in PARTS:
        spent = sum(t.get(part, 0.0) for t in timings.values())
        key = part.replace("-", "_")
        summary[f"{key}_s"] = round(spent, 2)
        summary[f"{key}_share"] = round(spent / replay, 4) if replay > 0 else None
    return summary


__all__ = [
    "KEEP_STATE",
    "PARTS",
    "REPLAY",
    "SECOND_REPLAY",
    "SNAPSHOT",
    "TimedKernel",
    "measuring",
    "timed",
    "timing_summary",
]
