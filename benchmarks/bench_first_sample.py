"""Time to the first scored sample of a run with 1 connection vs ``--connections`` (8), side by side.

Each run is a real ``themisto run`` ([`themisto_env.run.runner.run`][themisto_env.run.run]) of an offline agent over the
bundled samples, into a fresh folder: env start, dataset load, kernels, tools, scoring. The clock starts
when ``run`` is called and stops when ``results.jsonl`` holds its first row.
Beside it, every `KernelPool.take` of the run is timed: how long each slot waited for its first
kernel, and when the last slot had its first. The runs alternate (1, 8, 1, 8, ...) and the medians are
compared. The issue's goal: the first sample with 8 connections within 1.5x of the time with 1::

    python benchmarks/bench_first_sample.py [--connections 8] [--limit 16] [--repeat 3]
        [--agent runtime-rules] [--task output] [--observation tools] [--backend local]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from themisto_env.run.config import RunConfig
from themisto_env.run.runner import run
from themisto_env.sandbox.kernel.pool import KernelPool

_TAKES: list[tuple[int, float, float]] = []  # (thread id, seconds in take, when it returned) of the run measured
_TAKES_LOCK = threading.Lock()


def _timed_take(original: Any) -> Any:
    def take(self: KernelPool) -> Any:
        started = time.perf_counter()
        try:
            return original(self)
        finally:
            now = time.perf_counter()
            with _TAKES_LOCK:
                _TAKES.append((threading.get_ident(), now - started, now))

    return take


def rows_in(path: Path) -> int:
    """Complete lines in ``path`` (0 while it does not exist)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def timed_run(args: argparse.Namespace, connections: int, out: Path) -> dict[str, Any]:
    """Seconds to the first row, to each slot's first kernel and to the run's end; the slots' first waits."""
    config = RunConfig(
        agent=args.agent,
        task=args.task,
        observation=args.observation,
        backend=args.backend,
        limit=args.limit,
        max_connections=connections if connections > 1 else None,
    )
    _TAKES.clear()
    first_row: list[float] = []
    done = threading.Event()
    started = time.perf_counter()

    def watch() -> None:  # polls the results file for its first row
        while not done.is_set() and not first_row:
            if rows_in(out / "results.jsonl"):
                first_row.append(time.perf_counter() - started)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    summary = run(config, out, progress=False)
    total = time.perf_counter() - started
    done.set()
    watcher.join()
    firsts: dict[int, tuple[float, float]] = {}  # per slot (thread): its first take's wait and return
    for thread, waited, returned in _TAKES:
        firsts.setdefault(thread, (waited, returned - started))
    return {
        "first_row": first_row[0] if first_row else total,
        "last_kernel": max((r for _, r in firsts.values()), default=0.0),
        "total": total,
        "samples": summary["samples"],
        "waits": sorted(w for w, _ in firsts.values()) or [0.0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--limit", type=int, default=16, help="samples per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternating; medians reported")
    parser.add_argument("--agent", default="runtime-rules", help="an offline agent whose samples need a kernel")
    parser.add_argument("--task", default="output")
    parser.add_argument("--observation", default="tools")
    parser.add_argument("--backend", default="local")
    args = parser.parse_args()
    KernelPool.take = _timed_take(KernelPool.take)  # type: ignore[method-assign]
    print(f"{args.agent}, {args.task}/{args.observation}, {args.backend}, {args.limit} bundled samples per run")
    print(
        f"{'connections':>11} {'first row':>9} {'every slot has a kernel':>23} {'run':>6} {'samples':>7}"
        "   first take() wait per slot: min / median / max"
    )
    runs: dict[int, list[dict[str, Any]]] = {1: [], args.connections: []}
    with tempfile.TemporaryDirectory(prefix="bench-first-sample-") as tmp:
        run(  # untimed warm-up: imports, the bundled dataset found (or built), the page cache
            RunConfig(agent=args.agent, task=args.task, observation=args.observation, backend=args.backend, limit=1),
            Path(tmp) / "warm-up",
            progress=False,
        )
        for attempt in range(args.repeat):
            for connections in runs:
                f = timed_run(args, connections, Path(tmp) / f"c{connections}-{attempt}")
                runs[connections].append(f)
                waits = f["waits"]
                print(
                    f"{connections:>11} {f['first_row']:>8.2f}s {f['last_kernel']:>22.2f}s {f['total']:>5.1f}s"
                    f" {f['samples']:>7}   {min(waits):.2f} / {statistics.median(waits):.2f} / {max(waits):.2f} s"
                    f" ({len(waits)} slots)"
                )

    def median(connections: int, figure: str) -> float:
        return statistics.median(f[figure] for f in runs[connections])

    print(f"medians of {args.repeat}:")
    for connections in runs:
        print(
            f"{connections:>11} {median(connections, 'first_row'):>8.2f}s {median(connections, 'last_kernel'):>22.2f}s"
            f" {median(connections, 'total'):>5.1f}s"
        )
    n = args.connections
    print(
        f"{n} connections vs 1 (medians): first row {median(n, 'first_row') / median(1, 'first_row'):.2f}x "
        f"(goal: at most 1.5x), every slot's first kernel {median(n, 'last_kernel') / median(1, 'last_kernel'):.2f}x, "
        f"run {median(n, 'total') / median(1, 'total'):.2f}x"
    )


if __name__ == "__main__":
    main()
