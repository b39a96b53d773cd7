"""A copy's first cell against its later ones (issue 38, "copies at the kernel's round trip").

Run from the repository root (the bundled data is built into the cache the first time)::

    python benchmarks/bench_first_cell.py [--rounds 15]

Two templates of the median bundled snapshot's state, one spare each, alternating: **now** (IPython's
display formatters and ``%logstart`` logger built in the template, the pure parts of a cell run there and in
each copy before it answers) and **before** (``prebuild_modes.prebuild_mode("app")``: those parts built on the copy's
first cell). For each spare handed out: three ``1+1`` (the first, the second at once, the third after 100 ms
idle: a later cell that also wakes the kernel's threads), each timed in this process (wall), with the
kernel's CPU (``/proc/PID/task/*/schedstat``: every thread, nanoseconds) and minor page faults (a page the
copy wrote for the first time: its template's, copied, or a new one). Medians. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prebuild_modes import prebuild_mode  # the benchmarks' own switch, beside this script
from rich.console import Console
from rich.table import Table

from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.state.copies import imported_modules

CELLS = ("first", "second", "third, after 100 ms idle")


def usage(pid: int) -> tuple[int, float]:
    """Minor faults and CPU seconds (every thread) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    nanoseconds = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            nanoseconds += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread ended meanwhile
    return int(fields[7]), nanoseconds / 1e9


def cells(kernel: Kernel) -> dict[str, float]:
    """The three ``1+1`` of a copy just handed out: wall ms, kernel CPU ms and faults of each."""
    pid = kernel.launcher.pid()
    assert pid is not None
    figures: dict[str, float] = {}
    for name in CELLS:
        if name.startswith("third"):
            time.sleep(0.1)
        faults, cpu = usage(pid)
        started = time.perf_counter()
        kernel.execute("1+1")
        figures[f"{name} ms"] = (time.perf_counter() - started) * 1000
        after_faults, after_cpu = usage(pid)
        figures[f"{name} CPU ms"] = (after_cpu - cpu) * 1000
        figures[f"{name} faults"] = after_faults - faults
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    dataset = Dataset.open()
    trajectories = list(dataset.trajectories.values())
    preload = tuple(imported_modules(trajectories, submodules=True))
    store = SnapshotStore(dataset.snapshot_dir)
    written = {s.snapshot for t in trajectories for s in t.steps if s.snapshot and s.snapshot in store}
    digest = sorted(written, key=lambda d: store.path(d).stat().st_size)[len(written) // 2]
    templates: dict[str, KernelTemplate] = {}
    for kind, flag in (("before", "app"), ("now", "1")):
        with prebuild_mode(flag):
            templates[kind] = KernelTemplate("local", preload=preload, snapshot_dir=dataset.snapshot_dir, spares=1)
            templates[kind].start()
    rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in templates}
    try:
        for template in templates.values():
            for _ in range(2):  # a state template keeps spares once a second copy was asked for
                template.state(digest).kernel().close()
        for _ in range(args.rounds):
            for kind, template in templates.items():
                state = template.state(digest)
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and any(
                    not t.state(digest)._spares or t.state(digest)._forking for t in templates.values()
                ):
                    time.sleep(0.01)
                time.sleep(0.1)  # the spare idle, as one waiting for its caller
                with state.kernel() as kernel:
                    rows[kind].append(cells(kernel))
    finally:
        for template in templates.values():
            template.close()
    console = Console()
    console.print(
        f"{args.rounds} copies of each kind, alternating; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    table = Table(
        "a copy's 1+1 (medians)", "before ms", "before CPU ms", "before faults", "now ms", "now CPU ms", "now faults"
    )
    for name in CELLS:
        values = [
            statistics.median(row[f"{name}{unit}"] for row in rows[kind])
            for kind in ("before", "now")
            for unit in (" ms", " CPU ms", " faults")
        ]
        table.add_row(name, *(f"{v:.1f}" if i % 3 != 2 else f"{v:.0f}" for i, v in enumerate(values)))
    console.print(table)


if __name__ == "__main__":
    main()
