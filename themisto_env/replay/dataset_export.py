"""A dataset folder made shareable: Parquet tables, a dataset card, and everything that serves its states.

``themisto data export DATASET --out DIR`` (`export_dataset_folder`) writes::

    DIR/README.md                      the dataset card (YAML header for a dataset hub: configs and splits)
    DIR/data/<task>/train.parquet      a task's samples on the split's train side (and test.parquet)
    DIR/data/trajectories.parquet      one row per trajectory (ids, notebook, user, environment, split, ...)
    DIR/data/steps.parquet             one row per execution (source, outputs as JSON, time, memory, ...)
    DIR/manifest.json, trajectories.jsonl, files/, splits.json, environment-requirements.txt
                                       the dataset folder itself: ``Dataset.open(DIR)`` serves it
    DIR/snapshots/<xx>/<digest>.dill   the snapshots its steps name (checked against their digest)

The tables load with pandas (``pd.read_parquet``) and with Hugging Face ``datasets``
(``load_dataset("parquet", data_files={"train": "DIR/data/next-cell/train.parquet", ...})``, or
``load_dataset(DIR, "next-cell")``, which reads the card's configs). An env over ``DIR`` takes its
snapshots from ``DIR/snapshots`` ([`Dataset.snapshot_dir`][themisto_env.replay.Dataset.snapshot_dir]), so the states it
serves are the original's, checked against the recorded fingerprints as always. Nothing is uploaded.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.kind_and_size import LEVEL_WORDS
from themisto_env.data.samples import TASKS
from themisto_env.data.splits import DEFAULT_SPLIT, SIDES, SPLITS, SplitRule
from themisto_env.data.stats import dataset_info
from themisto_env.data.trajectory import FILES, MANIFEST, TRAJECTORIES, Trajectory
from themisto_env.data.writes import write_text_atomic
from themisto_env.errors import ConfigError
from themisto_env.replay.dataset import SNAPSHOTS, Dataset
from themisto_env.sandbox.store.snapshot_store import SnapshotStore

__all__ = ["ExportReport", "export_dataset_folder"]

CARD = "README.md"
EXTRA_FILES = ("environment-requirements.txt",)
"""Files beside the manifest that travel with it (when present)."""


@dataclass
class ExportReport:
    """What an export wrote.

    Attributes:
        out: The folder.
        samples: Per task and side, the samples written.
        trajectories: Trajectories written.
        steps: Executions written.
        snapshots: Snapshots copied.
        missing_snapshots: Snapshots the steps name that the store does not hold (their states are replayed
            from the nearest earlier snapshot instead), or whose bytes do not hash to their name.
        split: The split's name and rule.
        megabytes: The folder's size.
    """

    out: Path
    samples: dict[str, dict[str, int]] = field(default_factory=dict)
    trajectories: int = 0
    steps: int = 0
    snapshots: int = 0
    missing_snapshots: int = 0
    split: tuple[str, SplitRule] | None = None
    megabytes: float = 0.0


def export_dataset_folder(
    dataset: Dataset | str | Path | None,
    out: str | Path,
    *,
    split: str = DEFAULT_SPLIT,
    snapshot_dir: str | Path | None = None,
    snapshots: bool = True,
) -> ExportReport:
    """Write a dataset as Parquet, a dataset card, and the folder and snapshots that serve it.

    Args:
        dataset: An open dataset, a folder, or None for the bundled data.
        out: The folder to write (created; must be empty or absent).
        split: The named split whose sides the sample tables follow (``default``: the written one, or the
            default rule).
        snapshot_dir: The snapshot store the dataset was built with (None: the dataset's own, else the cache).
        snapshots: Copy the snapshots (False: a smaller folder whose states are replayed from the cells).

    Raises:
        ConfigError: ``out`` exists and is not empty, or the split is unknown or leaves a side empty.
    """
    import pandas as pd

    whole = (dataset if isinstance(dataset, Dataset) else Dataset.open(dataset)).whole  # a side: its whole
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: give a new or empty folder (an export never writes over files)")
    rule = whole.split_rule(split)
    sides = {name: whole.view(name if split == DEFAULT_SPLIT else f"{split}:{name}") for name in SIDES}
    side_of = {tid: name for name, view in sides.items() for tid in view.trajectories}
    out.mkdir(parents=True, exist_ok=True)
    report = ExportReport(out=out, split=(split, rule))

    # the dataset folder itself (one line per trajectory), its files and its side files
    trajectories = list(whole.trajectories.values())
    lines = "".join(t.model_dump_json() + "\n" for t in trajectories)
    write_text_atomic(out / TRAJECTORIES, lines)
    shutil.copy2(whole.path / MANIFEST, out / MANIFEST)
    for name in (*EXTRA_FILES, SPLITS):
        if (whole.path / name).exists():
            shutil.copy2(whole.path / name, out / name)
    if (whole.path / FILES).is_dir():
        shutil.copytree(whole.path / FILES, out / FILES)
    report.trajectories, report.steps = len(trajectories), sum(len(t.steps) for t in trajectories)

    # the tables
    data = out / "data"
    for task in TASKS:
        report.samples[task] = {}
        for name, view in sides.items():
            rows = [_sample_row(s, whole.trajectories[s.trajectory_id], name) for s in view.samples(task)]
            (data / task).mkdir(parents=True, exist_ok=True)
            pd.DataFrame(rows, columns=list(_SAMPLE_COLUMNS)).to_parquet(data / task / f"{name}.parquet", index=False)
            report.samples[task][name] = len(rows)
    pd.DataFrame([_trajectory_row(t, side_of[t.id]) for t in trajectories]).to_parquet(
        data / "trajectories.parquet", index=False
    )
    pd.DataFrame([row for t in trajectories for row in _step_rows(t)]).to_parquet(data / "steps.parquet", index=False)

    # the snapshots
    if snapshots:
        source = SnapshotStore(snapshot_dir or whole.snapshot_dir)
        target = out / SNAPSHOTS
        for digest in sorted({s.snapshot for t in trajectories for s in t.steps if s.snapshot}):
            path = source.path(digest)
            try:
                data_bytes = path.read_bytes()
            except OSError:
                report.missing_snapshots += 1
                continue
            if hashlib.sha256(data_bytes).hexdigest() != digest:  # damaged: never handed on
                report.missing_snapshots += 1
                continue
            (target / digest[:2]).mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / digest[:2] / path.name)
            if path.with_suffix(".env").exists():
                shutil.copy2(path.with_suffix(".env"), target / digest[:2] / path.with_suffix(".env").name)
            report.snapshots += 1

    report.megabytes = round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6, 1)  # but the card
    write_text_atomic(out / CARD, _card(whole, report, dataset_info(whole.path)))
    return report


_SAMPLE_COLUMNS = (
    "sample_id",
    "task",
    "trajectory_id",
    "step",
    "target",
    "cell",
    "notebook_name",
    "user_id",
    "split",
)


def _sample_row(sample: Any, trajectory: Trajectory, side: str) -> dict[str, Any]:
    return {
        "sample_id": sample.id,
        "task": sample.task,
        "trajectory_id": sample.trajectory_id,
        "step": sample.step,
        "target": sample.target,
        "cell": trajectory.steps[sample.step].source,
        "notebook_name": trajectory.notebook_name,
        "user_id": trajectory.user_id,
        "split": side,
    }


def _trajectory_row(trajectory: Trajectory, side: str) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory.id,
        "session_key": trajectory.session_key,
        "notebook_name": trajectory.notebook_name,
        "user_id": trajectory.user_id,
        "origin": trajectory.origin,
        "source_path": trajectory.source_path,
        "backend": trajectory.backend,
        "environment": trajectory.environment,
        "complete": trajectory.complete,
        "failure": trajectory.failure,
        "executions": len(trajectory.steps),
        "agreement": trajectory.agreement,
        "packages": json.dumps(trajectory.packages, sort_keys=True),
        "split": side,
    }


def _step_rows(trajectory: Trajectory) -> list[dict[str, Any]]:
    return [
        {
            "trajectory_id": trajectory.id,
            "index": step.index,
            "cell_id": step.cell_id,
            "source": step.source,
            "status": step.status,
            "recorded_outputs": json.dumps(step.recorded_outputs),
            "outputs": json.dumps(step.outputs),
            "recorded_duration_s": step.recorded_duration_s,
            "duration_s": step.duration_s,
            "memory_bytes": step.memory_bytes,
            "restarted_before": step.restarted_before,
            "interrupted": step.interrupted,
            "agrees": step.agrees,
            "agreement_kind": step.agreement_kind,
            "recorded_level": step.recorded_level,
            "snapshot": step.snapshot,
            "fingerprint": json.dumps(step.fingerprint, sort_keys=True) if step.fingerprint is not None else None,
            "files": step.files,
        }
        for step in trajectory.steps
    ]


CARD_NOTEBOOKS = 20
"""The card lists every notebook up to this many; past it, the 10 with most drops and the total."""


def _corpus_rows(corpus: dict[str, Any]) -> str:
    """The per-notebook table (`themisto_env.data.corpus`) as Markdown, the total row last."""
    rows = corpus["notebooks"]
    left_out = ""
    if len(rows) > CARD_NOTEBOOKS:
        rows = sorted(rows, key=lambda r: -sum(sum(c.values()) for c in r["dropped"].values()))[:10]
        left_out = f"\n\n({len(corpus['notebooks']) - len(rows)} more notebooks with fewer drops not listed.)"
    lines = [
        "| notebook | sessions | executions | "
        + " | ".join(f"{t} kept / dropped" for t in TASKS)
        + " | largest drop causes |",
        "| --- " * (4 + len(TASKS)) + "|",
    ]
    for row in [*rows, corpus["total"]]:
        counts = " | ".join(f"{row['kept'][t]} / {sum(row['dropped'][t].values())}" for t in TASKS)
        causes = "; ".join(
            f"{t}: " + ", ".join(f"{c} {n}" for c, n in row["top_causes"][t]) for t in TASKS if row["top_causes"][t]
        )
        name = row["notebook"].replace("|", "\\|")
        lines.append(f"| {name} | {row['trajectories']} | {row['executions']} | {counts} | {causes} |")
    return "\n".join(lines) + left_out


def _card(dataset: Dataset, report: ExportReport, info: dict[str, Any]) -> str:
    """The dataset card: a YAML header a dataset hub reads (configs, splits), then what the data is."""
    manifest = dataset.manifest
    name, rule = report.split or (DEFAULT_SPLIT, SplitRule())
    configs = "".join(
        f"- config_name: {task}\n  data_files:\n"
        + "".join(f"  - split: {side}\n    path: data/{task}/{side}.parquet\n" for side in SIDES)
        for task in TASKS
    )
    environment = manifest.environment
    if environment is not None:
        env_text = (
            f"kernel environment `{environment.name or environment.id}` (Python {environment.python}); its "
            "requirements are in `environment-requirements.txt` (`themisto kernel-env create NAME --requirements "
            "environment-requirements.txt` makes it again)"
        )
    else:
        env_text = "the tool's own Python"
    packages = ", ".join(f"{k} {v}" for k, v in sorted(manifest.packages.items())) or "none recorded"
    bundled = str(bundled_log_path())
    sources = "\n".join(
        f"- `{source}`: "
        + (
            "themisto-env's bundled log, written for the project (Apache-2.0)"
            if source == bundled
            else "licence not recorded by the build"
        )
        for source in manifest.sources
    )
    sizes = "\n".join(f"| {task} | {counts['train']} | {counts['test']} |" for task, counts in report.samples.items())
    agreement = info["agreement"]
    kinds = "\n".join(f"| {kind} | {n} |" for kind, n in info["agreement_kinds"].items())
    levels = ", ".join(f"{LEVEL_WORDS[lv]} {n}" for lv, n in info["recorded_levels"].items()) or "none"
    leak = dataset.leakage(rule)
    verbatim = "; ".join(f"{t}: {n} of {leak.test_samples.get(t, 0)}" for t, n in leak.verbatim_test_targets.items())
    return f"""---
license: other
pretty_name: themisto-env trajectories
tags:
- jupyter
- notebooks
- code
- runtime-state
configs:
{configs}---

# Jupyter development trajectories (themisto-env)

Every cell execution a person performed, in order, replayed in a real kernel: the source, the recorded and
the replayed outputs, time, memory and a snapshot of the kernel's state after each step. Made by
`themisto data build` and `themisto data export` (format `{manifest.format}` version {manifest.version}).

## Sources and licences

{sources}

State each source's licence here (and in `license:` above) before you publish: the build records where the
data came from, not under which terms.

## How it was built

Replayed on the `{manifest.backend}` backend ({"with" if manifest.snapshots else "without"} snapshots) on
{manifest.created}, in {env_text}. Packages the cells imported: {packages}.

## Sizes

{report.trajectories} trajectories, {report.steps} executions, {report.snapshots} snapshots
({report.missing_snapshots} missing), {report.megabytes} MB in all.

| task | train samples | test samples |
| --- | --- | --- |
{sizes}

Per notebook, the samples the default rule keeps and why it drops the others (before the split):

{_corpus_rows(info["corpus"])}

## Splits

Split `{name}`: {rule.describe()} (hash-based: a trajectory keeps its side when data is added). Leakage:
trajectories on both sides {leak.trajectories_on_both_sides}; test targets that occur verbatim (whitespace
normalised) as a train target: {verbatim}.

## Replay agreement

{"n/a" if agreement is None else f"{agreement:.1%}"} of {info["compared"]} executions with recorded outputs
replay to the same output (normalised). Judged at the level the recording held (executions): {levels};
a recording of each output's kind and size (JuNE as published) is compared by kinds in order and sizes, and
the replayed output is the target. By cause:

| cause | executions |
| --- | --- |
{kinds}

## Use

```python
import pandas as pd
from datasets import load_dataset

train = load_dataset("parquet", data_files={{"train": "data/next-cell/train.parquet"}})["train"]
steps = pd.read_parquet("data/steps.parquet")
```

With themisto-env, the folder is a dataset whose states can be served (its snapshots are in
`snapshots/`): `Dataset.open("THIS_FOLDER")`, `themisto run --data THIS_FOLDER --split test`.

## Publishing

Nothing is uploaded by themisto-env. To publish on the Hugging Face Hub: `huggingface-cli login`, then
`huggingface-cli upload ORG/NAME THIS_FOLDER . --repo-type dataset` (the header above gives the viewer
its configs and splits). Snapshots are dill files: loading one runs code, so users should load only
datasets they trust (themisto-env checks each snapshot's digest before it loads it).
"""
