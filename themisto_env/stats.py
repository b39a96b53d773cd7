"""Figures about a trajectory dataset (``themisto data info``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from themisto_env.samples import TASKS, make_samples
from themisto_env.sandbox.snapshots import SnapshotStore
from themisto_env.trajectory import read_trajectories


def dataset_info(folder: str | Path) -> dict[str, Any]:
    """Sessions, executions, samples per task under the default rule, and replay agreement."""
    trajectories = read_trajectories(folder)
    steps = [(t, s) for t in trajectories for s in t.steps]
    store = SnapshotStore()
    digests = {s.snapshot for _, s in steps if s.snapshot and s.snapshot in store}
    agree = sum(s.agrees for _, s in steps)
    return {
        "folder": str(folder),
        "trajectories": len(trajectories),
        "complete": sum(t.complete for t in trajectories),
        "notebooks": len({t.notebook_name for t in trajectories}),
        "executions": len(steps),
        "errors": sum(s.status == "error" for _, s in steps),
        "restarts": sum(s.restarted_before for _, s in steps),
        "snapshots": len(digests),
        "snapshot_mb": round(sum(store.path(d).stat().st_size for d in digests) / 1e6, 1),
        "samples": {task: len(make_samples(trajectories, task)) for task in TASKS},
        "agreement": agree / len(steps) if steps else 1.0,
        "disagreements": [{"trajectory": t.id, "step": s.index, "source": s.source} for t, s in steps if not s.agrees],
        "failures": {t.id: t.failure for t in trajectories if not t.complete},
    }
