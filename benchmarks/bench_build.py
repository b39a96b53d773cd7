"""Dataset build throughput, snapshot sizes, and restore-to-step-k vs replaying steps 0..k-1.

Run from the repository root::

    python benchmarks/bench_build.py [--backend local] [--sessions 1] [--repeat 1] [--ks 5,15,30]

On the bundled JuNE log (``themisto_env.data.bundled.bundled_log_path()``), limited to its first
``--sessions`` sessions, one kernel replays each session with `themisto_env.build.builder.replay_session`
with and without snapshots (alternating, after an untimed warm-up replay of its first 5 cells) and
reports executions per
second (median over ``--repeat``), and the snapshot size per step (median, max). Then, on the first
session's trajectory, for each k: restoring the snapshot taken after step k-1 into the kernel vs
restarting it and re-executing steps 0..k-1 (median over ``--repeat``); the ratio per k. Snapshots are
written to a temporary store. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from rich.console import Console
from rich.table import Table

from themisto_env.build.session_replay import replay_session
from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.june import read_sessions
from themisto_env.sandbox.kernel.core import Kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="local", help="local (default), docker, bwrap")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per figure (median)")
    parser.add_argument("--sessions", type=int, default=1, help="first N sessions of the bundled log")
    parser.add_argument("--ks", default="5,15,30", help="steps k to restore to (comma-separated)")
    args = parser.parse_args()
    console = Console()
    sessions = read_sessions(bundled_log_path())[: args.sessions]
    executions = sum(len(s.executions) for s in sessions)
    console.print(
        f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; backend={args.backend}; "
        f"{len(sessions)} session(s), {executions} executions; repeat={args.repeat}"
    )
    with (
        tempfile.TemporaryDirectory(prefix="bench-build-") as store,
        Kernel(args.backend, snapshot_dir=store) as kernel,
    ):
        warm = sessions[0].model_copy(update={"executions": sessions[0].executions[:5]})
        replay_session(warm, kernel, snapshots=False)  # warm-up (imports, page cache), first 5 cells
        rates: dict[bool, list[float]] = {True: [], False: []}
        trajectories = []
        for _ in range(args.repeat):
            for snapshots in (False, True):
                started = time.perf_counter()
                built = [replay_session(s, kernel, snapshots=snapshots) for s in sessions]
                rates[snapshots].append(executions / (time.perf_counter() - started))
                if snapshots:
                    trajectories = built
        sizes = [
            kernel.store.path(step.snapshot).stat().st_size for t in trajectories for step in t.steps if step.snapshot
        ]

        trajectory = trajectories[0]
        ks = [k for k in (int(x) for x in args.ks.split(",")) if 0 < k <= len(trajectory.steps)]
        per_k = []
        for k in ks:
            digest = trajectory.steps[k - 1].snapshot
            if digest is None or any(s.restarted_before for s in trajectory.steps[1:k]):
                continue
            restores, replays = [], []
            for _ in range(args.repeat):
                kernel.restart()
                started = time.perf_counter()
                kernel.snapshots.restore(digest)
                restores.append(time.perf_counter() - started)
                kernel.restart()
                started = time.perf_counter()
                for step in trajectory.steps[:k]:
                    kernel.execute(step.source)
                replays.append(time.perf_counter() - started)
            per_k.append((k, statistics.median(restores), statistics.median(replays)))

    with_s, without_s = statistics.median(rates[True]), statistics.median(rates[False])
    table = Table(title=f"build throughput ({args.backend}, medians)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("executions/s without snapshots", f"{without_s:.2f}")
    table.add_row("executions/s with snapshots", f"{with_s:.2f}")
    table.add_row("ratio with / without", f"{with_s / without_s:.2f}x")
    table.add_row("snapshots", str(len(sizes)))
    if sizes:
        table.add_row("snapshot size per step, median (KB)", f"{statistics.median(sizes) / 1e3:,.1f}")
        table.add_row("snapshot size per step, max (KB)", f"{max(sizes) / 1e3:,.1f}")
    console.print(table)

    table = Table(title=f"restore to step k vs replay steps 0..k-1 (trajectory {trajectory.id}, fresh kernel)")
    for col in ("k", "restore (ms)", "replay (ms)", "replay / restore"):
        table.add_column(col, justify="right")
    for k, restore, replay in per_k:
        table.add_row(str(k), f"{restore * 1000:,.1f}", f"{replay * 1000:,.1f}", f"{replay / restore:.2f}x")
    console.print(table)


if __name__ == "__main__":
    main()
