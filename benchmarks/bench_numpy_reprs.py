"""Numpy 2's scalar reprs (issue 43): how are the cells whose replay differs from the saved output only by
numpy 2's scalar reprs (``np.int64(8)`` for ``8``, ``np.float64(1.5)`` for ``1.5``, ``np.True_`` for ``True``)
classified?

A step is *numpy-2-repr-only* when its normalised outputs differ and rewriting the replay's numpy 2 reprs
the numpy 1 way (`themisto_env.data.agreement.numpy_1_reprs`) makes them equal. The script reads built
datasets (or builds the notebooks it is given first with ``themisto data build``, one worker, in this Python
or, for ``NOTEBOOK::REQUIREMENTS``, in the environment of those requirements) and prints: the
numpy-2-repr-only steps by ``agreement_kind``; every disagreeing step by kind; the output samples dropped
by cause (`themisto_env.data.samples.sample_counts`).

``--before-python PY`` also runs this script under another checkout's interpreter (e.g. a worktree of an
older commit, with its own venv) with ``--recompare``: it reads the same datasets' ``trajectories.jsonl``
itself (dropping the keys its `Trajectory` model does not know, so an older model reads a newer dataset),
recompares every step with that code's ``refresh_agreement(t, force=True)`` (no replay: both outputs are
stored) and hands back each step's kind; the tables then show both sides.

    python benchmarks/bench_numpy_reprs.py DATASET_OR_NOTEBOOK[::REQS]... [--build-dir DIR] [--cell-timeout 60]
        [--before-python PY] [--details] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

KEY = tuple[str, int]  # (trajectory id, step index)


# --- reading ----------------------------------------------------------------------------------------------


def _model_fields(model: Any) -> set[str]:
    return set(model.model_fields)


def recompared(folders: list[Path]) -> list[Any]:
    """The datasets' trajectories read by hand and compared again by the importable themisto_env."""
    from themisto_env.data.trajectory import Step, Trajectory, refresh_agreement

    out = []
    tfields, sfields = _model_fields(Trajectory), _model_fields(Step)
    for folder in folders:
        for line in (folder / "trajectories.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            raw = json.loads(line)
            raw["steps"] = [{k: v for k, v in s.items() if k in sfields} for s in raw.get("steps", [])]
            t = Trajectory.model_validate({k: v for k, v in raw.items() if k in tfields})
            refresh_agreement(t, force=True)
            out.append((folder, t))
    return out


def as_read(folders: list[Path]) -> list[Any]:
    from themisto_env.data.trajectory import read_trajectories

    return [(folder, t) for folder in folders for t in read_trajectories(folder)]


def step_key(folder: Path, trajectory: Any, step: Any) -> str:
    """A step's name across datasets (two datasets can hold trajectories of the same id)."""
    return f"{folder}:{trajectory.id}:{step.index}"


def kinds_and_drops(trajectories: list[tuple[Path, Any]]) -> dict[str, Any]:
    from themisto_env.data.samples import sample_counts

    kinds = {step_key(f, t, s): s.agreement_kind for f, t in trajectories for s in t.steps}
    return {"kinds": kinds, "drops": dict(sample_counts([t for _, t in trajectories], "output").by_cause)}


# --- building ---------------------------------------------------------------------------------------------


def datasets_of(specs: list[str], build_dir: Path, cell_timeout: float) -> list[Path]:
    """Dataset folders as given; each notebook (or folder of notebooks) ``PATH[::REQUIREMENTS]`` built first
    (once) by ``themisto data build`` with one worker, in this Python or the environment of its requirements."""
    out = []
    for spec in specs:
        where, _, reqs = spec.partition("::")
        path = Path(where).resolve()
        if (path / "trajectories.jsonl").is_file():
            out.append(path)
            continue
        dest = build_dir / (path.parent.name + "-" + path.stem).replace(" ", "_")
        if not (dest / "trajectories.jsonl").is_file():
            cmd = ["themisto", "data", "build", str(path), "--out", str(dest), "--workers", "1"]
            cmd += ["--cell-timeout", str(cell_timeout)]
            cmd += ["--requirements", str(Path(reqs).resolve())] if reqs else []
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        out.append(dest)
    return out


# --- counting ---------------------------------------------------------------------------------------------


def numpy_only(step: Any) -> bool:
    from themisto_env.data.agreement import normalize_outputs, numpy_1_reprs

    seen, got = normalize_outputs(step.recorded_outputs), normalize_outputs(step.outputs)
    return seen != got and numpy_1_reprs(got) == seen


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = (str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in pairs)
        return "| " + " | ".join(cells) + " |"

    sep = "| " + " | ".join("-" * w if i == 0 else "-" * (w - 1) + ":" for i, w in enumerate(widths)) + " |"
    return "\n".join([line(header), sep, *map(line, rows)])


def side_by_side(title: str, after: Counter[str], before: Counter[str] | None) -> str:
    names = sorted(set(after) | set(before or {}), key=lambda k: (-(after[k] + (before or Counter())[k]), k))
    total = ("total", *([str(sum(before.values()))] if before is not None else []), str(sum(after.values())))
    rows = [(k, *([str(before[k])] if before is not None else []), str(after[k])) for k in names]
    header = (title, *(["before"] if before is not None else []), "after")
    return table([*rows, total], header)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="dataset folders, or notebooks (folders of them) as PATH[::REQS]")
    ap.add_argument("--build-dir", type=Path, default=Path.home() / ".cache" / "themisto-env" / "bench-numpy-reprs")
    ap.add_argument("--cell-timeout", type=float, default=60.0)
    ap.add_argument("--before-python", help="an older checkout's interpreter: also count with its comparison")
    ap.add_argument("--recompare", action="store_true", help="(internal) recompare and print kinds as JSON")
    ap.add_argument("--details", action="store_true", help="list the numpy-2-repr-only steps")
    ap.add_argument("--json", type=Path, help="write the counts here")
    args = ap.parse_args()

    if args.recompare:  # run by --before-python: this interpreter's code compares, nothing else
        print(json.dumps(kinds_and_drops(recompared([Path(p).resolve() for p in args.paths]))))
        return

    folders = datasets_of(args.paths, args.build_dir, args.cell_timeout)
    trajectories = as_read(folders)
    after = kinds_and_drops(trajectories)
    before = None
    if args.before_python:
        cmd = [args.before_python, str(Path(__file__).resolve()), "--recompare", *map(str, folders)]
        before = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)

    np_after, np_before, all_after, all_before = Counter(), Counter(), Counter(), Counter()
    listed: list[str] = []
    changed: list[str] = []
    per_notebook: Counter[str] = Counter()
    for folder, t in trajectories:
        for s in t.steps:
            key = step_key(folder, t, s)
            old = before["kinds"].get(key) if before else None
            if not s.agrees:
                all_after[s.agreement_kind] += 1
            if before and old not in (None, "ok"):
                all_before[old] += 1
            if numpy_only(s):
                np_after[s.agreement_kind] += 1
                np_before[old or "?"] += 1
                per_notebook[t.notebook_name or t.source_path or t.id] += 1
                listed.append(f"  {t.notebook_name}#{s.index}: {old} -> {s.agreement_kind}: {s.source.strip()[:70]!r}")
            elif args.details and before and old != s.agreement_kind:
                changed.append(f"  {t.notebook_name}#{s.index}: {old} -> {s.agreement_kind}: {s.source.strip()[:70]!r}")
    steps = sum(len(t.steps) for _, t in trajectories)
    print(f"{len(trajectories)} notebooks, {steps} steps, {sum(np_after.values())} numpy-2-repr-only\n")
    print(side_by_side("numpy-2-repr-only steps by kind", np_after, np_before if before else None), "\n")
    print(side_by_side("disagreeing steps by kind", all_after, all_before if before else None), "\n")
    drops_b = Counter(before["drops"]) if before else None
    print(side_by_side("output samples dropped by cause", Counter(after["drops"]), drops_b), "\n")
    print(table([(k, str(v)) for k, v in per_notebook.most_common()], ("notebook", "numpy-2-repr-only")))
    if args.details:
        print("\n".join(["", "numpy-2-repr-only steps (before -> after):", *listed]))
        if changed:
            print("\n".join(["", "other steps whose kind changed:", *changed]))
    share = np_after["environment"] / max(1, sum(np_after.values()))
    print(f"\nafter: {np_after['environment']}/{sum(np_after.values())} ({share:.0%}) called 'environment'")
    if args.json:
        counts = {
            "numpy_only": {"after": np_after, "before": np_before},
            "all": {"after": all_after, "before": all_before},
            "drops": {"after": after["drops"], "before": before and before["drops"]},
        }
        args.json.write_text(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main()
