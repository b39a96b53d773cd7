"""Dataset build on 1 vs N kernels at once (``themisto data build --workers N``), side by side.

Run from the repository root::

    python benchmarks/bench_build_workers.py [--copies 2] [--workers 1,2] [--rounds 1] [--no-snapshots]
                                             [--ray] [--json PATH]

The source is the bundled JuNE log (6 sessions, 321 executions) repeated ``--copies`` times (each copy's
kernel and session ids prefixed, so that every copy is a session of its own; 5 copies are the issue's
1,605 executions). Each configuration is one
[`themisto_env.build.builder.build_dataset`][themisto_env.build.build_dataset] into a fresh dataset folder and a fresh
snapshot store, timed end to end (kernel starts included), after an untimed warm-up (a kernel that imports the packages
the sessions use, so that every configuration finds them in the page cache). ``--ray`` adds a build on a private local
Ray instance with the largest worker count (its start-up is inside the timing). With ``--rounds R`` every configuration
is built R times, the order reversed every other round (so that a change of the machine's load weighs on each alike),
and the median is reported.

Printed per configuration: seconds, executions per second, the speed-up over one worker (else the first
configuration), and the cores used (CPU time of this process and of its kernels, over the wall time;
Ray's processes are not counted: n/a). Every build's trajectories are compared with the one-worker
build's (steps, outputs, fingerprints, agreement, snapshot digests; not the measured time and memory):
"same"; "same but kernel pids" when they differ only in what names the kernel process (ipykernel's cell
file names ``/tmp/ipykernel_<pid>/...`` in tracebacks, and so the snapshots of functions defined in
cells: two builds on one kernel differ the same way); or the first difference. Nothing is asserted;
the goal (2 workers at least 1.7x one) is printed as met or missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from themisto_env.build.builder import build_dataset
from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.trajectory import TRAJECTORIES
from themisto_env.sandbox.kernel.core import Kernel

GOAL = 1.7
MEASURED = ("duration_s", "memory_bytes")
KERNEL_PID = re.compile(r"ipykernel_\d+")
WARM_UP = "import numpy, pandas, sklearn.ensemble, sklearn.linear_model, sklearn.model_selection, matplotlib.pyplot"


def repeated_log(copies: int, folder: Path) -> Path:
    """The bundled log ``copies`` times over, each copy's kernel and session ids prefixed ``c<i>-``."""
    rows = [json.loads(line) for line in bundled_log_path().read_text().splitlines() if line.strip()]
    path = folder / f"bundled-x{copies}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for copy in range(copies):
            for row in rows:
                f.write(
                    json.dumps(
                        {
                            **row,
                            "kernel_id": f"c{copy}-{row['kernel_id']}",
                            "session_id": f"c{copy}-{row['session_id']}",
                        }
                    )
                    + "\n"
                )
    return path


def replayed(folder: Path) -> list[dict[str, Any]]:
    """A dataset's trajectories in file order, without what a replay measures."""
    trajectories = [json.loads(line) for line in (folder / TRAJECTORIES).read_text().splitlines()]
    for trajectory in trajectories:
        for step in trajectory["steps"]:
            for key in MEASURED:
                step.pop(key, None)
    return trajectories


def without_kernel_identity(trajectory: dict[str, Any]) -> dict[str, Any]:
    """A trajectory with what names the kernel process left out: the pid in ipykernel's cell file names
    (``/tmp/ipykernel_<pid>/<hash>.py``, in tracebacks) and the snapshot digests (a function defined in a
    cell is pickled with that file name, so its snapshot's bytes name the pid too); which steps have a
    snapshot stays."""
    text = KERNEL_PID.sub("ipykernel_<pid>", json.dumps(trajectory, sort_keys=True))
    plain = json.loads(text)
    for step in plain["steps"]:
        step["snapshot"] = step["snapshot"] is not None
    return plain


def compare(built: list[dict[str, Any]], reference: list[dict[str, Any]]) -> str:
    """'same', 'same but kernel pids (N snapshot digests differ)', or where the first difference is."""
    if [t["id"] for t in built] != [t["id"] for t in reference]:
        return "different trajectories or order"
    if built == reference:
        return "same"
    for mine, theirs in zip(built, reference, strict=True):
        a, b = without_kernel_identity(mine), without_kernel_identity(theirs)
        if a != b:
            steps = [i for i, (x, y) in enumerate(zip(a["steps"], b["steps"], strict=False)) if x != y]
            return f"{mine['id']} differs" + (f" from step {steps[0]}" if steps else "")
    digests = sum(
        x["snapshot"] != y["snapshot"]
        for mine, theirs in zip(built, reference, strict=True)
        for x, y in zip(mine["steps"], theirs["steps"], strict=True)
    )
    return f"same but kernel pids ({digests} snapshot digests differ)"


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the kernels)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=2, help="times the bundled log is repeated (5: 1,605 executions)")
    parser.add_argument("--workers", default="1,2", help="worker counts to compare (comma-separated)")
    parser.add_argument("--rounds", type=int, default=1, help="builds per configuration, order alternating (median)")
    parser.add_argument("--backend", default="local", help="local (default), docker, bwrap")
    parser.add_argument("--no-snapshots", dest="snapshots", action="store_false", help="build without snapshots")
    parser.add_argument("--ray", action="store_true", help="also build on a local Ray instance")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    console = Console()
    counts = [int(n) for n in args.workers.split(",")]
    configs: list[tuple[str, int, str | None]] = [(f"{n} worker{'s' * (n > 1)}", n, None) for n in counts]
    if args.ray:
        configs.append((f"Ray local, {max(counts)} actors", max(counts), "local"))

    with tempfile.TemporaryDirectory(prefix="bench-build-workers-") as scratch:
        root = Path(scratch)
        log = repeated_log(args.copies, root)
        with Kernel(args.backend) as kernel:  # warm-up: the packages in the page cache
            kernel.execute(WARM_UP)
        load_before = os.getloadavg()[0]
        console.print(
            f"load average: {load_before:.2f} on {os.cpu_count()} cores; backend={args.backend}; "
            f"snapshots={args.snapshots}; {args.copies} copies of the bundled log"
        )
        timings: dict[int, list[tuple[float, float | None]]] = {i: [] for i in range(len(configs))}
        outcome: dict[int, tuple[list[dict[str, Any]], int]] = {}
        first_round: dict[int, list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            order = list(range(len(configs)))[:: -1 if round_ % 2 else 1]
            for i in order:
                name, workers, ray = configs[i]
                out, store = root / f"dataset-{i}-{round_}", root / f"snapshots-{i}-{round_}"
                cpu, started = cpu_seconds(), time.perf_counter()
                report = build_dataset(
                    [log], out, backend=args.backend, snapshots=args.snapshots, snapshot_dir=store, progress=False,
                    workers=workers, ray=ray,
                )  # fmt: skip
                seconds = time.perf_counter() - started
                timings[i].append((seconds, None if ray else (cpu_seconds() - cpu) / seconds))
                outcome[i] = (replayed(out), len(report.failed))
                first_round.setdefault(i, outcome[i][0])
                shutil.rmtree(out)
                shutil.rmtree(store)
                console.print(f"  round {round_ + 1}, {name}: {seconds:.1f} s", highlight=False)
        base = next((i for i, (_, n, ray) in enumerate(configs) if n == 1 and ray is None), 0)
        reference = first_round[base]
        base_seconds = statistics.median(t for t, _ in timings[base])
        rows: list[dict[str, Any]] = []
        for i, (name, workers, ray) in enumerate(configs):
            built, failed = outcome[i]
            seconds = statistics.median(t for t, _ in timings[i])
            cores = [c for _, c in timings[i] if c is not None]
            executions = sum(len(t["steps"]) for t in built)
            rows.append(
                {
                    "config": name,
                    "workers": workers,
                    "ray": ray,
                    "sessions": len(built),
                    "executions": executions,
                    "failed": failed,
                    "seconds": round(seconds, 2),
                    "seconds_each": [round(t, 2) for t, _ in timings[i]],
                    "executions_per_s": round(executions / seconds, 3),
                    "speedup": round(base_seconds / seconds, 3),
                    "cores_used": round(statistics.median(cores), 2) if cores else None,
                    "trajectories": compare(built, reference),
                }
            )
        load_after = os.getloadavg()[0]

    table = Table(title=f"build of {rows[0]['sessions']} sessions, {rows[0]['executions']} executions")
    columns = ("config", "seconds", "executions/s", "speed-up", "cores used", "trajectories vs 1 worker")
    for column in columns:
        table.add_column(column, justify="left" if column in (columns[0], columns[-1]) else "right")
    for row in rows:
        cores = f"{row['cores_used']:.2f}" if row["cores_used"] is not None else "n/a"
        table.add_row(
            row["config"], f"{row['seconds']:.1f}", f"{row['executions_per_s']:.2f}", f"{row['speedup']:.2f}x",
            cores, row["trajectories"],
        )  # fmt: skip
    console.print(table)
    console.print(f"load average after: {load_after:.2f}")
    if args.rounds > 1:
        again = compare(outcome[base][0], reference)
        console.print(f"{configs[base][0]}, last round vs first: {again}", highlight=False)
    two = next((r for r in rows if r["workers"] == 2 and r["ray"] is None), None)
    if two is not None and any(r["workers"] == 1 and r["ray"] is None for r in rows):
        verdict = "met" if two["speedup"] >= GOAL else "missed"
        console.print(f"goal: 2 workers at least {GOAL}x one worker: {two['speedup']:.2f}x ({verdict})")
    if args.json:
        payload = {
            "load_before": load_before, "load_after": load_after, "copies": args.copies, "rounds": args.rounds,
            "rows": rows,
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
