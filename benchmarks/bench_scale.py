"""Scale-out: throughput (samples per second) with 1 and 2 workers, local processes and Ray, side by side.

Run from the repository root::

    python benchmarks/bench_scale.py [--data DIR] [--task output] [--agent runtime-rules] [--workers 1 2]
                                     [--limit N] [--no-ray] [--json PATH]

Without ``--data`` the bundled dataset is used (built into the cache the first time). Each configuration
is one ``themisto_env.run.runner.run`` over the same samples into a fresh folder, timed end to end (worker
processes or Ray actors start, load the dataset and start their kernels inside the timing). The Ray
instance is started once before the Ray runs and its start-up is reported apart: on a cluster it is
already running. Before timing, the dataset's snapshot files are read once so that every configuration
finds them in the page cache.

The single-worker local run is also profiled, in exclusive wall time (a category's time excludes the
categories nested in it): the kernel (ground-truth cells, snapshot restores, restarts, start-up), tools
(tool calls, with their kernel round trips), metrics (``score`` and ``reward``), observation rendering,
the agent's ``act``, env construction (dataset load), and the rest (the runner's loop, results file).

"cores used" is the CPU time of the run's processes (the runner, its workers and their kernels) over its
wall time: below the worker count, the workers waited for CPUs that other processes held (Ray runs: n/a,
their processes belong to the Ray instance). Nothing is asserted; the goal (2 workers at least 1.7x one
worker) is printed as met or missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import themisto_env.env.core as env_module
import themisto_env.run.executors as serial_module
from themisto_env.data.trajectory import read_trajectories
from themisto_env.run.config import RunConfig
from themisto_env.run.rollout import make_run_agent
from themisto_env.run.runner import run
from themisto_env.sandbox.kernel.core import Kernel

GOAL = 1.7


class Profiler:
    """Exclusive wall time per category, for nested instrumented calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[Any]] = []  # [category, start, time spent in nested categories]

    def wrap(self, category: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([category, time.perf_counter(), 0.0])
            try:
                return func(*args, **kwargs)
            finally:
                cat, start, nested = self._stack.pop()
                total = time.perf_counter() - start
                self.seconds[cat] += total - nested
                self.calls[cat] += 1
                if self._stack:
                    self._stack[-1][2] += total

        return timed


@contextmanager
def instrumented(profiler: Profiler) -> Iterator[None]:
    """Patch the env, kernel and runner so the profiler sees each category (undone on exit)."""
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, category: str) -> None:
        original = getattr(owner, name)
        patches.append((owner, name, original))
        setattr(owner, name, profiler.wrap(category, original))

    for method, what in (("execute", "cells"), ("restore", "snapshot restores"), ("restart", "restarts")):
        patch(Kernel, method, f"kernel: {what}")
    patch(Kernel, "start", "kernel: start-up")
    patch(env_module, "run_tool", "tools")
    patch(env_module, "score", "metrics")
    patch(env_module, "reward", "metrics")
    patch(env_module, "render_history", "observation rendering")
    patch(env_module, "render_runtime", "observation rendering")
    patch(env_module.ThemistoEnv, "__init__", "env construction (dataset load)")

    make_agent = make_run_agent  # the serial executor calls the name it imported: patched there

    def make_timed_agent(config: RunConfig) -> Any:
        agent = make_agent(config)
        agent.act = profiler.wrap("agent", agent.act)
        return agent

    serial_module.make_run_agent = make_timed_agent
    try:
        yield
    finally:
        serial_module.make_run_agent = make_agent
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


def warm_snapshots(data: str | None) -> tuple[int, int]:
    """Read every snapshot of the dataset once (page cache); return (files, bytes)."""
    from themisto_env.replay.resolve import resolve_dataset
    from themisto_env.sandbox.store.snapshot_store import SnapshotStore

    folder = resolve_dataset(data)
    store = SnapshotStore()
    files = total = 0
    for trajectory in read_trajectories(folder):
        for step in trajectory.steps:
            if step.snapshot and step.snapshot in store:
                total += len(store.path(step.snapshot).read_bytes())
                files += 1
    return files, total


def timed_run(config: RunConfig, root: Path, name: str) -> dict[str, Any]:
    out = root / name
    shutil.rmtree(out, ignore_errors=True)
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    summary = run(config, out, progress=False)
    seconds = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_before
    return {"name": name, "samples": summary["samples"], "seconds": seconds, "cpu_seconds": cpu, "summary": summary}


def _cpu_seconds() -> float:
    """CPU time of this process and its finished descendants (workers and their kernels)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled one)")
    parser.add_argument("--task", default="output", choices=["next-cell", "output"])
    parser.add_argument("--agent", default="runtime-rules", help="registered agent (default: runtime-rules)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default: 1 2)")
    parser.add_argument("--limit", type=int, default=None, help="first N samples (default: all)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray runs")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    console = Console()
    console.print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    files, size = warm_snapshots(args.data)
    console.print(f"warmed {files} snapshots ({size / 1e6:.0f} MB)")
    base = RunConfig(agent=args.agent, task=args.task, data=args.data, limit=args.limit)
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    results: list[dict[str, Any]] = []
    profile: dict[str, Any] = {}
    try:
        for workers in args.workers:
            config = base.model_copy(update={"workers": workers})
            if workers == 1:
                profiler = Profiler()
                with instrumented(profiler):
                    result = timed_run(config, root, "local-1")
                profile = {"wall": result["seconds"], "seconds": dict(profiler.seconds), "calls": dict(profiler.calls)}
            else:
                result = timed_run(config, root, f"local-{workers}")
            results.append({"mode": "local processes", "workers": workers, **result})
            console.print(f"local {workers}: {result['samples']} samples in {result['seconds']:.1f} s")
        ray_start = None
        if not args.no_ray:
            from themisto_env.sandbox.ray.cluster import connect, import_ray

            started = time.perf_counter()
            connect("local", num_cpus=max(args.workers))
            ray_start = time.perf_counter() - started
            console.print(f"Ray local instance started in {ray_start:.1f} s (not counted below)")
            try:
                for workers in args.workers:
                    config = base.model_copy(update={"workers": workers, "ray": "local"})
                    result = timed_run(config, root, f"ray-{workers}")
                    results.append({"mode": "Ray actors", "workers": workers, **result})
                    console.print(f"ray {workers}: {result['samples']} samples in {result['seconds']:.1f} s")
            finally:
                import_ray().shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    table = Table(title=f"throughput: {args.agent} on {args.task}, load average now {os.getloadavg()[0]:.2f}")
    columns = ("mode", "workers", "samples", "seconds", "samples/s", "vs 1 worker", f"goal >= {GOAL}x", "cores used")
    for column in columns:
        table.add_column(column, justify="right" if column != "mode" else "left")
    for row in results:
        row["throughput"] = row["samples"] / row["seconds"]
        one = next((r for r in results if r["mode"] == row["mode"] and r["workers"] == 1), None)
        ratio = row["throughput"] / one["throughput"] if one and one is not row else None
        row["speedup"] = ratio
        goal = "" if ratio is None else ("met" if ratio >= GOAL else "missed")
        table.add_row(
            row["mode"],
            str(row["workers"]),
            str(row["samples"]),
            f"{row['seconds']:.1f}",
            f"{row['throughput']:.2f}",
            "" if ratio is None else f"{ratio:.2f}x",
            goal,
            f"{row['cpu_seconds'] / row['seconds']:.2f}" if row["mode"] == "local processes" else "n/a",
        )
    console.print(table)
    if profile:
        wall = profile["wall"]
        breakdown = Table(title="where the time goes: local, 1 worker (exclusive wall time)")
        for column in ("category", "seconds", "share", "calls", "ms per sample"):
            breakdown.add_column(column, justify="right" if column != "category" else "left")
        samples = results[0]["samples"] or 1
        rest = wall - sum(profile["seconds"].values())
        rows = [*sorted(profile["seconds"].items(), key=lambda kv: -kv[1]), ("rest (runner loop, I/O)", rest)]
        for category, seconds in rows:
            breakdown.add_row(
                category,
                f"{seconds:.2f}",
                f"{seconds / wall:.1%}",
                str(profile["calls"].get(category, "")),
                f"{1000 * seconds / samples:.1f}",
            )
        console.print(breakdown)
    if args.json:
        payload = {
            "results": [{k: v for k, v in r.items() if k != "summary"} for r in results],
            "profile": profile,
            "ray_start_seconds": ray_start,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
