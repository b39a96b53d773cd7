"""Latencies of the sandbox kernel (``themisto_env.sandbox.kernel.core.Kernel``) on one or more backends.

Run from the repository root::

    python benchmarks/bench_sandbox.py [--backend local] [--backend docker] [--repeat 3]

For each backend, each figure is the median of ``--repeat`` timed runs after one untimed warm-up:

* kernel start to ready (``Kernel(backend).start()``: process or container, kernel boot, first reply,
  helper installed);
* the ``1+1`` round trip, a pandas groupby cell, and ``kernel.introspect.list_variables()`` on the same
  kernel, interleaved with ``1+1`` so both see the same machine load (goal: call within 1.5x of ``1+1``);
* snapshot time and size of a heavy state (sklearn fits on generated data plus a large DataFrame);
* restore of that snapshot into the same kernel and into a fresh kernel vs re-executing the cells that
  built it in a fresh kernel (goal: fresh-kernel restore at least 2x faster than re-execution);
* docker only: start to ready under 1 s (goal).

Ratios are measured side by side in one run; goals are reported as met or missed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from themisto_env.sandbox.kernel.core import Kernel

GROUPBY_SETUP = """
import numpy as np, pandas as pd
_rng = np.random.default_rng(0)
df = pd.DataFrame({"key": _rng.integers(0, 1000, 200_000), "a": _rng.random(200_000), "b": _rng.random(200_000)})
"""
GROUPBY_CELL = 'df.groupby("key").agg({"a": ["mean", "max"], "b": "sum"}).head()'

HEAVY_CELLS = [
    "import numpy as np, pandas as pd\n"
    "from sklearn.datasets import make_classification\n"
    "from sklearn.ensemble import RandomForestClassifier, GradientBoostingClassifier\n"
    "from sklearn.linear_model import LogisticRegression",
    "X, y = make_classification(n_samples=3000, n_features=30, n_informative=12, random_state=0)",
    "forest = RandomForestClassifier(n_estimators=25, n_jobs=1, random_state=0).fit(X, y)",
    "boost = GradientBoostingClassifier(n_estimators=25, random_state=0).fit(X, y)",
    "logreg = LogisticRegression(max_iter=2000).fit(X, y)",
    "rng = np.random.default_rng(0)\n"
    "big = pd.DataFrame(rng.random((200_000, 12)), columns=[f'c{i}' for i in range(12)])\n"
    "big['label'] = rng.integers(0, 50, len(big)).astype(str)",
]


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def med(values: list[float]) -> float:
    return statistics.median(values)


def run_cells(kernel: Kernel, cells: list[str]) -> None:
    for cell in cells:
        result = kernel.execute(cell, timeout_s=300)
        if result.status != "ok":
            raise RuntimeError(f"cell failed: {cell[:60]!r}: {result.text()}")


def bench_backend(backend: str, repeat: int) -> dict[str, float]:
    store = tempfile.mkdtemp(prefix="bench-sandbox-")
    os.chmod(store, 0o777)  # a container's non-root user writes snapshots here
    try:
        return _bench_backend(backend, repeat, store)
    finally:
        shutil.rmtree(store, ignore_errors=True)


def _bench_backend(backend: str, repeat: int, store: str) -> dict[str, float]:
    r: dict[str, float] = {}
    # start to ready (one warm-up start, untimed)
    starts = []
    for i in range(repeat + 1):
        kernel = Kernel(backend, snapshot_dir=store)
        t = timed(kernel.start)
        kernel.close()
        if i:
            starts.append(t)
    r["start"] = med(starts)

    with Kernel(backend, snapshot_dir=store) as kernel:
        run_cells(kernel, [GROUPBY_SETUP])
        for _ in range(3):  # warm-up
            kernel.execute("1+1")
            kernel.introspect.list_variables()
            kernel.execute(GROUPBY_CELL)
        rounds = max(20, 10 * repeat)
        plus, calls, groupby = [], [], []
        for _ in range(rounds):
            plus.append(timed(lambda: kernel.execute("1+1")))
            calls.append(timed(lambda: kernel.introspect.list_variables()))
        for _ in range(repeat):
            groupby.append(timed(lambda: kernel.execute(GROUPBY_CELL)))
        r["one_plus_one"] = med(plus)
        r["list_variables"] = med(calls)
        r["groupby"] = med(groupby)

        # heavy state: build it, snapshot it
        kernel.restart()
        r["build_state"] = timed(lambda: run_cells(kernel, HEAVY_CELLS))
        snaps, info = [], None
        for _ in range(repeat):
            t0 = time.perf_counter()
            info = kernel.snapshots.save()
            snaps.append(time.perf_counter() - t0)
        assert info is not None
        r["snapshot"] = med(snaps)
        r["snapshot_mb"] = info.size_bytes / 1e6
        kernel.execute("1+1")  # warm-up restore path
        kernel.snapshots.restore(info)
        same = []
        for _ in range(repeat):
            kernel.execute("del big; x = 1")
            same.append(timed(lambda: kernel.snapshots.restore(info)))
        r["restore_same"] = med(same)

    fresh, reexec = [], []
    for i in range(repeat + 1):
        with Kernel(backend, snapshot_dir=store) as k1:
            t_restore = timed(lambda: k1.snapshots.restore(info))
        with Kernel(backend, snapshot_dir=store) as k2:
            t_exec = timed(lambda: run_cells(k2, HEAVY_CELLS))
        if i:  # first round is the warm-up (page cache, imports)
            fresh.append(t_restore)
            reexec.append(t_exec)
    r["restore_fresh"] = med(fresh)
    r["reexecute"] = med(reexec)
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", help="local (default), docker, bwrap; repeatable")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per figure (median)")
    args = parser.parse_args()
    backends = args.backend or ["local"]
    console = Console()
    console.print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; repeat={args.repeat}")
    results = {}
    for backend in backends:
        console.print(f"[bold]{backend}[/bold] ...")
        results[backend] = bench_backend(backend, args.repeat)

    table = Table(title="sandbox kernel: medians")
    table.add_column("measure")
    for backend in backends:
        table.add_column(backend, justify="right")
    rows = [
        ("start to ready (ms)", "start", 1000),
        ("1+1 round trip (ms)", "one_plus_one", 1000),
        ("pandas groupby cell (ms)", "groupby", 1000),
        ('call("list_variables") (ms)', "list_variables", 1000),
        ("heavy state: first build (s)", "build_state", 1),
        ("snapshot (ms)", "snapshot", 1000),
        ("snapshot size (MB)", "snapshot_mb", 1),
        ("restore, same kernel (ms)", "restore_same", 1000),
        ("restore, fresh kernel (ms)", "restore_fresh", 1000),
        ("re-execute cells, fresh kernel (ms)", "reexecute", 1000),
    ]
    for label, key, scale in rows:
        table.add_row(label, *(f"{results[b][key] * scale:,.2f}" for b in backends))
    console.print(table)

    goals = Table(title="ratios and goals (measured side by side)")
    for col in ("backend", "ratio", "value", "goal", "met"):
        goals.add_column(col)
    for b in backends:
        r = results[b]
        ratio = r["list_variables"] / r["one_plus_one"]
        goals.add_row(b, "list_variables / 1+1", f"{ratio:.2f}x", "<= 1.5x", "yes" if ratio <= 1.5 else "NO")
        speed = r["reexecute"] / r["restore_fresh"]
        goals.add_row(b, "re-execute / fresh restore", f"{speed:.2f}x", ">= 2x", "yes" if speed >= 2 else "NO")
        goals.add_row(b, "re-execute / same-kernel restore", f"{r['reexecute'] / r['restore_same']:.2f}x", "", "")
        if b == "docker":
            goals.add_row(b, "start to ready", f"{r['start']:.3f} s", "< 1 s", "yes" if r["start"] < 1 else "NO")
    console.print(goals)


if __name__ == "__main__":
    main()
