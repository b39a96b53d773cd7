"""A JuNE log as published (each output's kind and size) against the same log with whole outputs (issue 43).

The logs are not written by hand: the sessions below run in a real kernel first (the person's run), their
outputs are written as a JuNE log, and `published_events` writes the same log in the published shape. Both
are then built (the replay: a second real run) and what each keeps is compared.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from themisto_env.build.builder import build_dataset
from themisto_env.cli import app
from themisto_env.data.june_events import JuneEvent
from themisto_env.data.june_files import write_events
from themisto_env.data.kind_and_size import parts, published_events, same_parts, to_kind_and_size
from themisto_env.data.samples import make_samples
from themisto_env.data.splits import SplitRule
from themisto_env.data.stats import dataset_info
from themisto_env.data.trajectory import Trajectory, read_trajectories
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.dataset_export import export_dataset_folder
from themisto_env.sandbox import Kernel

pytestmark = pytest.mark.slow

SESSIONS: dict[str, list[str]] = {
    "frames": [
        "import numpy as np\nimport pandas as pd",
        "df = pd.DataFrame({'a': np.arange(12), 'b': np.arange(12) * 0.5})\ndf.head()",
        "df.describe()",
        "print(df.shape, len(df))",
        "df['c']",
        "df.dtypes",
        "object()",
        "import os\nprint('pid', os.getpid())",
        "%time total = df['b'].sum()",
        "float(total)",
        "import warnings\nwarnings.warn('check the units')",
        "print(np.random.default_rng().integers(1000, 9999))",
        "import matplotlib.pyplot as plt\nplt.plot(df['a'], df['b'])\nplt.show()",
    ],
    "values": [
        "scores = [0.81, 0.79, 0.84]",
        "len(scores)",
        "best = max(scores)\nbest",
        "print(f'best score {best:.2f}')",
        "import statistics\nstatistics.mean(scores)",
        "def double(x):\n    return x * 2\ndouble",
        "[double(s) for s in scores]",
        "undefined_name + 1",
        "sorted(scores, reverse=True)",
    ],
}


def _recorded_run() -> list[JuneEvent]:
    """The person's run: every session in a fresh real kernel, written as JuNE events with whole outputs."""
    events: list[JuneEvent] = []
    clock = datetime(2023, 5, 6, 10, 0, 0)
    for key, cells in SESSIONS.items():
        with Kernel("local") as kernel:
            for number, source in enumerate(cells):
                result = kernel.execute(source)
                cell = f"{key:x<8}{number:024x}"[:32]
                common: dict[str, Any] = {"kernel_id": key, "notebook_name": f"{key}.ipynb", "cell_index": cell}
                clock += timedelta(seconds=5)
                events.append(
                    JuneEvent(action_id=len(events), time=clock, event="execute", cell_source=source, **common)
                )
                clock += timedelta(seconds=result.duration_s)
                events.append(
                    JuneEvent(
                        action_id=len(events),
                        time=clock,
                        event="finished_execute",
                        cell_output=list(result.outputs),
                        **common,
                    )
                )
    return events


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both logs built: ``whole/`` and ``published/`` datasets in one folder."""
    root = tmp_path_factory.mktemp("published")
    events = _recorded_run()
    write_events(root / "whole.jsonl", events)
    write_events(root / "published.jsonl", published_events(events))
    for shape in ("whole", "published"):
        build_dataset([root / f"{shape}.jsonl"], root / shape, snapshot_dir=root / "snapshots", progress=False)
    return root


@pytest.fixture(scope="module")
def built(root: Path) -> dict[str, list[Trajectory]]:
    return {shape: read_trajectories(root / shape) for shape in ("whole", "published")}


def _sample_ids(trajectories: list[Trajectory], task: str) -> set[str]:
    return {s.id for s in make_samples(trajectories, task)}  # type: ignore[arg-type]


def test_each_step_says_the_level_it_was_judged_at(built: dict[str, list[Trajectory]]) -> None:
    assert {s.recorded_level for t in built["whole"] for s in t.steps} == {"content"}
    assert {s.recorded_level for t in built["published"] for s in t.steps} == {"kind-and-size"}


def test_a_published_log_keeps_the_output_samples_of_the_whole_one(built: dict[str, list[Trajectory]]) -> None:
    whole, published = (_sample_ids(built[shape], "output") for shape in ("whole", "published"))
    assert whole and len(published & whole) >= 0.85 * len(whole), (sorted(whole - published), len(whole))
    assert _sample_ids(built["whole"], "next-cell") == _sample_ids(built["published"], "next-cell")


def test_a_published_log_drops_a_sample_only_where_the_replay_really_differs(
    built: dict[str, list[Trajectory]],
) -> None:
    """What kind and size call a difference is one with whole outputs too: no cause from missing text."""
    whole = {(t.id, s.index): s for t in built["whole"] for s in t.steps}
    for trajectory in built["published"]:
        for step in trajectory.steps:
            if not step.agrees:
                twin = whole[(trajectory.id, step.index)]
                assert not twin.agrees, (step.source, step.agreement_kind, step.agreement_detail)


def test_the_size_tolerance_holds_between_two_real_runs(built: dict[str, list[Trajectory]]) -> None:
    """Every cell whose whole outputs agree agrees by kind and size, within the characters that vary; and the
    runs did print what varies (addresses, durations, process ids), so the tolerance was put to the test."""
    agreeing = [s for t in built["whole"] for s in t.steps if s.agrees and s.outputs]
    assert len(agreeing) >= 12
    for step in agreeing:
        recorded, replayed = parts(to_kind_and_size(step.recorded_outputs)), parts(step.outputs)
        assert same_parts(recorded, replayed), (step.source, recorded, replayed)
    varying = [p for s in agreeing for p in parts(s.outputs) if p.slack > 0]
    assert varying, "no cell printed an address, a duration or a process id"


def test_data_info_and_the_export_card_say_the_level(
    root: Path, built: dict[str, list[Trajectory]], tmp_path: Path
) -> None:
    folder = root / "published"
    executions = sum(len(t.steps) for t in built["published"])
    assert dataset_info(folder)["recorded_levels"] == {"kind-and-size": executions}
    shown = CliRunner().invoke(app, ["data", "info", str(folder), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["recorded_levels"] == {"kind-and-size": executions}
    table = CliRunner().invoke(app, ["data", "info", str(folder)], env={"COLUMNS": "200"})
    assert f"kind and size {executions}" in table.stdout
    dataset = Dataset.open(folder)
    dataset.save_split(SplitRule(test_size=0.5, seed=2), "halves")  # two trajectories: one on each side
    export_dataset_folder(dataset, tmp_path / "export", split="halves", snapshots=False)
    assert f"kind and size {executions}" in (tmp_path / "export" / "README.md").read_text()
