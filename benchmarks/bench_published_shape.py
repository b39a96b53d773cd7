"""A JuNE log with whole outputs against the same log as JuNE publishes it (kind and size only), side by side.

Both are built in one run, on the same backend, from the same events (the published one is written from the
whole one by `published_events`); prints per shape the samples each task keeps, the drops by cause, and the
share of the whole log's output samples the published one keeps (issue 43's goal: at least 85%).

    python benchmarks/bench_published_shape.py [LOG] [--sessions N] [--workers 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from themisto_env.build.builder import build_dataset
from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.june import sessions_from_events
from themisto_env.data.june_files import iter_events, write_events
from themisto_env.data.kind_and_size import published_events
from themisto_env.data.samples import TASKS, sample_counts
from themisto_env.data.trajectory import read_trajectories


def _build(log: Path, out: Path, snapshots: Path, workers: int) -> dict[str, Any]:
    started = time.perf_counter()
    build_dataset([log], out, snapshot_dir=snapshots, progress=False, workers=workers)
    trajectories = read_trajectories(out)
    steps = [s for t in trajectories for s in t.steps]
    row: dict[str, Any] = {"seconds": round(time.perf_counter() - started, 1), "executions": len(steps)}
    row["levels"] = {lv: sum(s.recorded_level == lv for s in steps) for lv in ("content", "kind-and-size", "nothing")}
    row["agree"] = sum(s.agrees for s in steps)
    for task in TASKS:
        counts = sample_counts(trajectories, task)
        row[task] = {"kept": counts.kept, "dropped_by_cause": dict(sorted(counts.by_cause.items()))}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", nargs="?", type=Path, default=bundled_log_path())
    parser.add_argument("--sessions", type=int, default=None, help="only the first N sessions")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    events = list(iter_events(args.log))
    if args.sessions is not None:
        keys = [s.key for s in sessions_from_events(events)][: args.sessions]
        events = [e for e in events if e.kernel_id in keys]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_events(root / "whole.jsonl", events)
        write_events(root / "published.jsonl", list(published_events(events)))
        rows = {
            shape: _build(root / f"{shape}.jsonl", root / shape, root / "snapshots", args.workers)
            for shape in ("whole", "published")
        }
    for shape, row in rows.items():
        print(f"{shape:>9}: {row['executions']} executions in {row['seconds']} s, levels {row['levels']}")
        for task in TASKS:
            print(f"{'':>11}{task}: kept {row[task]['kept']}, dropped {row[task]['dropped_by_cause']}")
    whole, published = rows["whole"]["output"]["kept"], rows["published"]["output"]["kept"]
    share = published / whole if whole else float("nan")
    print(f"output samples kept: published {published} / whole {whole} = {share:.1%}")
    if args.json is not None:
        args.json.write_text(json.dumps({"log": str(args.log), "rows": rows, "share": share}, indent=2) + "\n")


if __name__ == "__main__":
    main()
