"""Fixtures of the sandbox tests: each kernel backend in turn, the bwrap backend alone, and a busy machine."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, needs, require_backend

#: Busy processes per core of `busy_machine` (about the load of a 2-core machine shared with other work).
BUSY_PER_CORE = 2
#: What each busy process runs: a CPU loop, or a loop writing and syncing a file (IO).
_SPIN = "while True: pass"
_WRITE = """
import os, sys
path = sys.argv[1]
while True:
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
"""


def wait_ended(pidfds: dict[int, int], seconds: float) -> list[int]:
    """Wait for the ends of the processes behind pidfds (pid -> pidfd), an event, not a time (``seconds`` is
    a guard); return the pids still running then."""
    deadline = time.monotonic() + seconds
    waiting = dict(pidfds)
    while waiting and time.monotonic() < deadline:
        ready, _, _ = select.select(list(waiting.values()), [], [], max(0.0, deadline - time.monotonic()))
        waiting = {pid: fd for pid, fd in waiting.items() if fd not in ready}
    return sorted(waiting)


@pytest.fixture(scope="session")
@needs("bwrap")
def bwrap_backend() -> None:
    """The bwrap backend (the test is marked ``bwrap``, skipped as root or without bubblewrap)."""
    require_backend("bwrap")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each kernel backend in turn (skipped with the reason where it cannot run)."""
    require_backend(request.param)
    return str(request.param)


@pytest.fixture
def busy_machine(tmp_path: Path) -> Iterator[Callable[[], int]]:
    """Make the machine busy with other work from a point of the test on: calling the fixture's value starts
    `BUSY_PER_CORE` CPU-bound processes per core and one writing and syncing a file, and returns how
    many run. They are ended (by pid) after the test."""
    busy: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        cores = len(os.sched_getaffinity(0))
        commands = [[sys.executable, "-c", _SPIN]] * (BUSY_PER_CORE * cores)
        commands.append([sys.executable, "-c", _WRITE, str(tmp_path / "busy-io")])
        busy.extend(subprocess.Popen(command, stdin=subprocess.DEVNULL) for command in commands)
        return len(busy)

    try:
        yield start
    finally:
        for process in busy:
            process.send_signal(signal.SIGKILL)
            process.wait()
