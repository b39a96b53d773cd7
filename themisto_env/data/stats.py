"""Figures about a trajectory dataset (``themisto data info``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from themisto_env.data.agreement import KINDS, NORMALIZATION_VERSION, TOLERATED, agreement
from themisto_env.data.corpus import corpus_table
from themisto_env.data.kind_and_size import RECORD_LEVELS
from themisto_env.data.samples import TASKS, sample_counts, step_cause
from themisto_env.data.trajectory import (
    FIGURE_FILES_KEY,
    FILES,
    Manifest,
    Step,
    Trajectory,
    read_manifest,
    read_trajectories,
)
from themisto_env.sandbox.store.snapshot_store import SnapshotStore


def _share(hits: int, total: int) -> float | None:
    return hits / total if total else None


def dataset_info(folder: str | Path, *, raw: bool = False) -> dict[str, Any]:
    """Sessions, executions, samples per task under the default rule, and replay agreement.

    Agreement is over the steps that have recorded outputs to compare with; None ("n/a") when no step
    has any (an empty dataset, or only cleared notebooks). Disagreements are classified by
    `themisto_env.data.agreement.agreement` and listed per step; ``agreement_split`` says which
    share agrees, is tolerated (timings, warnings) and disagrees, and ``kinds_by_source`` counts the
    kinds per source file. ``corpus`` is the per-notebook table of executions, kept samples and drops by
    cause (`themisto_env.data.corpus.corpus_table`).

    Args:
        folder: A dataset folder.
        raw: Also compare every step's outputs without normalisation (``raw_agreement``,
            ``raw_kinds``, and ``raw`` on each listed step).

    Returns:
        The figures, JSON-ready.
    """
    manifest = read_manifest(folder)
    trajectories = read_trajectories(folder)
    steps = [(t, s) for t in trajectories for s in t.steps]
    own = Path(folder) / "snapshots"  # an exported dataset carries its snapshots
    store = SnapshotStore(own if own.is_dir() else None)
    digests = {s.snapshot for _, s in steps if s.snapshot and s.snapshot in store}
    compared = [(t, s) for t, s in steps if s.agreement_kind != "unrecorded"]
    kinds = Counter(step_cause(s) for _, s in steps)
    counts = {task: sample_counts(trajectories, task) for task in TASKS}
    info: dict[str, Any] = {
        "folder": str(folder),
        "trajectories": len(trajectories),
        "complete": sum(t.complete for t in trajectories),
        "notebooks": len({t.notebook_name for t in trajectories}),
        "executions": len(steps),
        "errors": sum(s.status == "error" for _, s in steps),
        "restarts": sum(s.restarted_before for _, s in steps),
        "snapshots": len(digests),
        "snapshot_mb": round(sum(store.path(d).stat().st_size for d in digests) / 1e6, 1),
        "files_mb": round(_folder_bytes(Path(folder) / FILES) / 1e6, 1),
        "figures_kept": len(
            {
                sha
                for _, s in steps
                for o in s.outputs
                for sha in ((o.get("metadata") or {}).get(FIGURE_FILES_KEY) or {}).values()
            }
        ),
        "samples": {task: c.kept for task, c in counts.items()},
        "samples_dropped_disagreeing": {task: c.disagreeing for task, c in counts.items()},
        "samples_dropped_by_cause": {task: c.by_cause for task, c in counts.items()},
        "corpus": corpus_table(trajectories).to_json(),
        "agreement": _share(sum(s.agrees for _, s in compared), len(compared)),
        "compared": len(compared),
        "normalization": NORMALIZATION_VERSION,
        "built_with_normalization": manifest.normalization,
        "agreement_kinds": {kind: kinds[kind] for kind in KINDS if kinds[kind]},
        "agreement_split": _split(compared),
        "recorded_levels": {lv: n for lv in RECORD_LEVELS if (n := sum(s.recorded_level == lv for _, s in steps))},
        "kinds_by_source": _kinds_by_source(steps),
        "disagreements": [_row(t.id, s, raw) for t, s in steps if not s.agrees and s.agreement_kind != "unrecorded"],
        "failures": {t.id: t.failure for t in trajectories if not t.complete},
        "kernel_environment": _environment(manifest),
        "working_folders": dict(manifest.workdirs),
    }
    if raw:
        verdicts = [agreement(s.recorded_outputs, s.outputs, raw=True) for _, s in compared]
        info["raw_agreement"] = _share(sum(v.agrees for v in verdicts), len(verdicts))
        raw_kinds = Counter(v.kind for v in verdicts)
        info["raw_kinds"] = {kind: raw_kinds[kind] for kind in KINDS if raw_kinds[kind]}
    return info


def _folder_bytes(folder: Path) -> int:
    """The bytes of the files under a folder (0 when there is none)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def _split(compared: list[tuple[Trajectory, Step]]) -> dict[str, float | None]:
    """Shares of the compared steps that agree, are tolerated (`TOLERATED`:
    timings, warnings) and disagree (every other cause)."""
    kinds = [step_cause(s) for _, s in compared]
    tolerated = sum(kind in TOLERATED for kind in kinds)
    agrees = sum(kind == "ok" for kind in kinds)
    return {
        "agrees": _share(agrees, len(kinds)),
        "tolerated": _share(tolerated, len(kinds)),
        "disagrees": _share(len(kinds) - agrees - tolerated, len(kinds)),
    }


def _kinds_by_source(steps: list[tuple[Trajectory, Step]]) -> dict[str, dict[str, int]]:
    """Per source file (a trajectory's ``source_path``, else its id): each kind and its count."""
    counts: dict[str, Counter[str]] = {}
    for trajectory, step in steps:
        source = trajectory.source_path or trajectory.id
        counts.setdefault(source, Counter())[step_cause(step)] += 1
    return {source: {kind: c[kind] for kind in KINDS if c[kind]} for source, c in counts.items()}


def _environment(manifest: Manifest) -> dict[str, Any] | None:
    """The kernel environment the dataset was replayed in (id, name, Python); None for the tool's own."""
    ref = manifest.environment
    if ref is None:
        return None
    return {"id": ref.id, "name": ref.name, "python": ref.python}


def _row(trajectory_id: str, step: Step, raw: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "trajectory": trajectory_id,
        "step": step.index,
        "kind": step.agreement_kind or "other",
        "detail": step.agreement_detail or "",
        "source": step.source,
    }
    if raw:
        row["raw_agrees"] = agreement(step.recorded_outputs, step.outputs, raw=True).agrees
    return row
