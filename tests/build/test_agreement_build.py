"""Replay agreement end to end: a notebook saved years ago, replayed by the real builder; its steps' kinds,
`themisto data info`, and the samples that follow what the person saw (the env serves no other)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from typer.testing import CliRunner

from themisto_env.build.builder import build_dataset
from themisto_env.cli import app
from themisto_env.data.agreement import NORMALIZATION_VERSION
from themisto_env.data.samples import SampleRule, make_samples, sample_counts
from themisto_env.data.stats import dataset_info
from themisto_env.data.trajectory import read_manifest, read_trajectories
from themisto_env.env.core import ThemistoEnv

pytestmark = pytest.mark.slow


def _stream(text: str) -> dict[str, Any]:
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _result(text: str, count: int) -> dict[str, Any]:
    return nbformat.v4.new_output("execute_result", data={"text/plain": text}, execution_count=count)


def _error(ename: str, evalue: str, frame: str) -> dict[str, Any]:
    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{frame} in <module>"])


# (source, outputs saved in the notebook, the kind its replay gets)
CELLS: list[tuple[str, list[dict[str, Any]], str]] = [
    ("import math\nimport random", [], "ok"),
    # the old inline backend's figure size
    (
        "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\nplt.figure()",
        [_result("<Figure size 432x288 with 0 Axes>", 2)],
        "ok",
    ),
    # an old ipython-input cell name where today's kernel names a file (compiled here under such a name)
    (
        "compile('1 +', '/tmp/ipykernel_4711/2519893127.py', 'exec')",
        [_error("SyntaxError", "invalid syntax (<ipython-input-3-0a1b2c3d4e5f>, line 1)", "<ipython-input-3-x>")],
        "ok",
    ),
    ("print('area', round(math.pi * 2 ** 2, 2))  ", [_stream("area 12.57   \n")], "ok"),
    ("import seaborn_is_not_installed_here", [], "missing-module"),
    ("math.no_such_function(1)", [_result("1", 6)], "missing-attribute"),
    ("open('data/sales.csv').read()[:3]", [_result("'a,b'", 7)], "missing-file"),
    ("random.random()", [_result("0.8444218515250481", 8)], "nondeterminism"),
    ("undefined_name", [_stream("defined then\n")], "error-vs-ok"),
    (
        "from IPython.display import HTML, display\ndisplay(HTML('<b>total</b>'))",
        [],
        "display",
    ),
    ("'Total'.upper()", [_result("'Total'", 11)], "environment"),  # the same on a second replay
]


def _notebook(path: Path, *, counts: bool = True) -> Path:
    nb = nbformat.v4.new_notebook()
    for i, (source, outputs, _) in enumerate(CELLS):
        cell = nbformat.v4.new_code_cell(source, execution_count=i + 1 if counts else None, outputs=outputs)
        if not counts:
            for output in cell.outputs:
                if output.output_type == "execute_result":
                    output.execution_count = None
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("agreement")
    (root / "old").mkdir()
    (root / "stripped").mkdir()
    notebooks = [_notebook(root / "old" / "old.ipynb"), _notebook(root / "stripped" / "stripped.ipynb", counts=False)]
    report = build_dataset(notebooks, root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert len(report.built) == 2 and not report.failed, report
    return {"dataset": root / "dataset", "snapshots": root / "snapshots"}


def test_every_step_gets_its_kind_and_the_dataset_its_normalisation(built: dict[str, Path]) -> None:
    assert read_manifest(built["dataset"]).normalization == NORMALIZATION_VERSION
    for trajectory in read_trajectories(built["dataset"]):
        assert trajectory.normalization == NORMALIZATION_VERSION
        kinds = [s.agreement_kind for s in trajectory.steps]
        assert kinds == [kind for _, _, kind in CELLS], trajectory.id
        assert [s.agrees for s in trajectory.steps] == [kind == "ok" for _, _, kind in CELLS]
        assert all(bool(s.agreement_detail) == (not s.agrees) for s in trajectory.steps)
        assert trajectory.agreement == pytest.approx(4 / len(CELLS))


def test_data_info_counts_and_lists_the_disagreements(built: dict[str, Path]) -> None:
    info = dataset_info(built["dataset"], raw=True)
    assert info["agreement"] == pytest.approx(4 / len(CELLS)) and info["compared"] == 2 * len(CELLS)
    assert info["raw_agreement"] < info["agreement"]  # figure size, frame, trailing spaces
    expected = {kind: 0 for _, _, kind in CELLS}
    for _, _, kind in CELLS:
        expected[kind] += 2
    assert info["agreement_kinds"] == expected
    first = [row for row in info["disagreements"] if row["trajectory"].startswith("old")]
    assert [(row["step"], row["kind"]) for row in first] == [
        (i, kind) for i, (_, _, kind) in enumerate(CELLS) if kind != "ok"
    ]
    missing = next(row for row in first if row["kind"] == "missing-module")
    assert "No module named 'seaborn_is_not_installed_here'" in missing["detail"]
    assert all("raw_agrees" in row for row in first)

    result = CliRunner().invoke(app, ["data", "info", str(built["dataset"]), "--raw"])
    assert result.exit_code == 0, result.output
    assert "replay agreement" in result.output and "36.4% of 22 compared" in result.output
    assert "[missing-file]" in result.output and "No such file or directory" in result.output
    as_json = json.loads(CliRunner().invoke(app, ["data", "info", str(built["dataset"]), "--json"]).output)
    assert as_json["agreement_kinds"] == expected


def test_output_samples_follow_what_the_person_saw(built: dict[str, Path]) -> None:
    trajectories = read_trajectories(built["dataset"])
    everything = SampleRule(max_length_quantile=None, drop_empty=False, follow_recording=False)
    following = SampleRule(max_length_quantile=None, drop_empty=False)
    disagreeing = {
        f"{t.id}/output/{s.index}" for t in trajectories for s in t.steps if s.agreement_kind not in ("ok", None)
    }
    assert len(disagreeing) == 2 * 7
    all_ids = {s.id for s in make_samples(trajectories, "output", everything)}
    kept_ids = {s.id for s in make_samples(trajectories, "output", following)}
    assert kept_ids == all_ids - disagreeing
    counts = sample_counts(trajectories, "output", following)
    assert (counts.candidates, counts.disagreeing, counts.kept) == (22, 14, 8)
    # next-cell targets are the person's code: not dropped for what the replay showed
    assert sample_counts(trajectories, "next-cell", following).disagreeing == 0
    assert dataset_info(built["dataset"])["samples_dropped_disagreeing"] == {"next-cell": 0, "output": 14}

    env = ThemistoEnv(task="output", dataset=str(built["dataset"]), snapshot_dir=str(built["snapshots"]))
    try:
        served = {s.id for s in env.episode.samples}
        assert served and not served & disagreeing
        assert "old-notebook/output/7" not in served  # random.random(): the replay's number is not the person's
    finally:
        env.close()


def test_an_empty_dataset_has_no_agreement(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# notes only")]
    nbformat.write(nb, tmp_path / "notes.ipynb")
    build_dataset([tmp_path / "notes.ipynb"], tmp_path / "dataset", snapshots=False, progress=False)
    info = dataset_info(tmp_path / "dataset")
    assert info["executions"] == 0 and info["agreement"] is None
    result = CliRunner().invoke(app, ["data", "info", str(tmp_path / "dataset")])
    assert result.exit_code == 0 and "n/a of 0 compared" in result.output, result.output
