"""``themisto data export``: Parquet tables that pandas and Hugging Face ``datasets`` load, a dataset card,
and a folder that ``Dataset.open`` serves with the original's states (the round trip)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.data.corpus import corpus_table
from themisto_env.data.splits import SplitRule
from themisto_env.data.trajectory import read_trajectories
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.errors import ConfigError
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.dataset_export import export_dataset_folder

NOTEBOOKS = {
    "prices": [
        "rows = open('prices.csv').read().splitlines()",
        "header, *body = rows",
        "values = [float(line.split(',')[1]) for line in body]",
        "mean = sum(values) / len(values)",
        "print(round(mean, 2))",
        "cheap = [v for v in values if v < mean]",
        "len(cheap)",
    ],
    "words": [
        "text = 'the quick brown fox jumps over the lazy dog'",
        "words = text.split()",
        "counts = {w: words.count(w) for w in words}",
        "top = max(counts, key=counts.get)",
        "print(top)",
        "lengths = sorted(len(w) for w in words)",
        "lengths[-1]",
    ],
}


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two notebooks (one reading a file of its folder) built with their own snapshot store, and a split
    written that puts one on each side."""
    from themisto_env.build.builder import build_dataset
    from themisto_env.data.splits import assign

    root = tmp_path_factory.mktemp("export-original")
    paths = []
    for name, cells in NOTEBOOKS.items():
        folder = root / name
        folder.mkdir()
        if name == "prices":
            (folder / "prices.csv").write_text("item,price\na,1.5\nb,4.0\nc,2.25\nd,8.0\n")
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(cells)]
        nbformat.write(nb, folder / f"{name}.ipynb")
        paths.append(folder / f"{name}.ipynb")
    report = build_dataset(paths, root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert len(report.built) == 2 and not report.failed, report
    dataset = Dataset.open(root / "dataset")
    trajectories = dataset.trajectories.values()
    seed = next(
        s
        for s in range(200)
        if len(set(assign(trajectories, SplitRule(test_size=0.5, seed=s), require_both=False).values())) == 2
    )
    dataset.save_split(SplitRule(test_size=0.5, seed=seed))
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


@pytest.fixture(scope="module")
def exported(original: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "shared"
    done = CliRunner().invoke(
        app, ["data", "export", original["dataset"], "--out", str(out), "--snapshot-dir", original["snapshot_dir"]]
    )
    assert done.exit_code == 0, done.output
    assert "0 missing" in done.output
    return out


def test_the_tables_load_with_pandas_and_datasets(original: dict[str, str], exported: Path) -> None:
    datasets = pytest.importorskip("datasets")
    dataset = Dataset.open(original["dataset"])
    for task in ("next-cell", "output"):
        files = {side: str(exported / "data" / task / f"{side}.parquet") for side in ("train", "test")}
        loaded = datasets.load_dataset("parquet", data_files=files)
        for side in ("train", "test"):
            want = dataset.view(side).samples(task)
            assert loaded[side]["sample_id"] == [s.id for s in want]
            assert loaded[side]["target"] == [s.target for s in want]
            assert set(loaded[side]["split"]) == {side}
    by_card = datasets.load_dataset(str(exported), "next-cell")  # the card's configs name the files
    assert sorted(by_card) == ["test", "train"]
    steps = pd.read_parquet(exported / "data" / "steps.parquet")
    assert len(steps) == sum(len(t.steps) for t in dataset.trajectories.values())
    assert json.loads(steps.iloc[4]["outputs"])[0]["text"].strip() == "3.94"  # print(round(mean, 2))
    trajectories = pd.read_parquet(exported / "data" / "trajectories.parquet")
    assert sorted(trajectories["split"]) == ["test", "train"]


def test_the_card_says_what_the_data_is_and_how_to_publish_it(exported: Path) -> None:
    card = (exported / "README.md").read_text()
    assert card.startswith("---\n") and "configs:" in card and "path: data/next-cell/train.parquet" in card
    for heading in ("Sources and licences", "How it was built", "Sizes", "Splits", "Replay agreement", "Publishing"):
        assert f"## {heading}" in card
    assert "trajectories on both sides 0" in card and "huggingface-cli upload" in card
    total = corpus_table(read_trajectories(exported)).total
    row = next(line for line in card.splitlines() if line.startswith("| total |"))  # the per-notebook table's last
    assert row.startswith(f"| total | {total.trajectories} | {total.executions} | {total.kept['next-cell']} / "), row


@pytest.mark.slow  # two envs serve every sample of both trajectories: about 9 s under load
def test_the_exported_folder_serves_the_original_states(
    original: dict[str, str], exported: Path, tmp_path: Path
) -> None:
    """Round trip: the same samples, and at every sample the same tool answers from a verified state,
    served from the export's own snapshots (the original store moved away first)."""
    source = Dataset.open(original["dataset"])
    copy = Dataset.open(exported)
    assert copy.snapshot_dir == exported / "snapshots"
    for task in ("next-cell", "output"):
        assert copy.samples(task) == source.samples(task)
    assert [t.model_dump() for t in copy.trajectories.values()] == [
        t.model_dump() for t in source.trajectories.values()
    ]

    def answers(env: ThemistoEnv) -> list[tuple[str, str, str]]:
        seen = []
        for tid in env.episode.episode_ids:
            env.reset(options={"trajectory": tid})
            while True:
                obs, _, _, _, info = env.step(ToolCall(tool="list_variables"))
                seen.append((info["sample_id"], obs["tool_result"], info["state"]["check"]))
                *_, terminated, _, _ = env.step(Prediction(text=""))
                if terminated:
                    break
        return seen

    env = ThemistoEnv(dataset=source, snapshot_dir=original["snapshot_dir"], warm_kernels=0, tool_cost=0)
    try:
        before = answers(env)
    finally:
        env.close()
    moved = shutil.move(original["snapshot_dir"], tmp_path / "moved-away")
    try:
        served = ThemistoEnv(dataset=str(exported), warm_kernels=0, tool_cost=0)
        try:
            assert served.episode.config.kernel.snapshot_dir == str(exported / "snapshots")
            after = answers(served)
        finally:
            served.close()
    finally:
        shutil.move(moved, original["snapshot_dir"])
    assert after == before
    assert {check for *_, check in after} == {"verified"}
    assert any("prices" in sid for sid, *_ in after) and any("words" in sid for sid, *_ in after)


def test_an_export_never_writes_over_files(original: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("keep")
    with pytest.raises(ConfigError, match="new or empty folder"):
        export_dataset_folder(original["dataset"], tmp_path / "taken")
    assert (tmp_path / "taken" / "x").read_text() == "keep"
