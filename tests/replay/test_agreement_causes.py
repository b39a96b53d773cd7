"""Every disagreement with its cause (issue 30): small notebooks and a log of our own, each cell exhibiting one
cause, labelled by hand from what the cell does (before any build), replayed by the real builder.

The labels are ours, assigned from the cells' code: an independent check of the causes, not the issue's
real-notebook figure (those 10 notebooks are not on this machine).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from typer.testing import CliRunner

from themisto_env.build.builder import build_dataset
from themisto_env.cli import app
from themisto_env.data.agreement import DISAGREEMENTS
from themisto_env.data.samples import SampleRule, make_samples, sample_counts
from themisto_env.data.stats import dataset_info
from themisto_env.data.trajectory import Trajectory, read_trajectories
from themisto_env.sandbox.models import SandboxLimits

pytestmark = pytest.mark.slow


def _stdout(text: str) -> dict[str, Any]:
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _result(text: str) -> dict[str, Any]:
    return nbformat.v4.new_output("execute_result", data={"text/plain": text}, execution_count=1)


# (source, outputs saved in the notebook, the cause a person reading the cell gives it)
CELLS: list[tuple[str, list[dict[str, Any]], str]] = [
    ("import numpy as np\nimport random\nimport time\nimport warnings", [], "ok"),
    ("warnings.warn('this API will change', FutureWarning)\nprint('loaded')", [_stdout("loaded\n")], "warning"),
    ("print(np.random.rand())", [_stdout("0.5488135039273248\n")], "nondeterminism"),
    ("rng = np.random.default_rng(0)\nprint(rng.integers(1000))", [_stdout("417\n")], "environment"),
    ("import seaborn_not_installed_here as sns", [], "missing-module"),
    ("sns.set_theme()", [], "upstream"),
    ("sales = open('data/sales.csv').read()", [], "missing-file"),
    ("print(len(sales))", [_stdout("1204\n")], "upstream"),
    (
        "t0 = time.time()\ntotal = sum(range(10**5))\nprint('took', round(time.time() - t0 + 0.02, 4), 'for', total)",
        [_stdout("took 0.0231 for 4999950000\n")],
        "timing",
    ),
    ("weights = np.random.rand(3)", [], "ok"),
    ("print(round(weights.sum(), 3))", [_stdout("1.234\n")], "upstream"),
    ("np.random.seed(0)\nprint(np.random.randint(100))", [_stdout("44\n")], "ok"),
    ("print(np.random.randint(100))", [_stdout("7\n")], "environment"),
    ("!python3 scripts/prepare.py", [_stdout("prepared 3 files\n")], "missing-file"),
    ("from IPython.display import HTML, display\ndisplay(HTML('<b>total</b>'))", [], "display"),
    ("'Total'.upper()", [_result("'Total'")], "environment"),
    ("print(undefined_before)", [_stdout("3\n")], "error-vs-ok"),
    ("print(total + 1)", [_stdout("4999950001\n")], "ok"),
    ("time.sleep(30)\nprint('trained')", [_stdout("trained\n")], "timeout"),
]
CELL_TIMEOUT_S = 6.0  # every cell's limit in this build: the last cell needs 30 s


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("causes")
    folder = root / "project"
    folder.mkdir()
    (folder / "requirements.txt").write_text("numpy==1.21.6\npandas>=1.3\n")
    nb = nbformat.v4.new_notebook()
    for i, (source, outputs, _) in enumerate(CELLS):
        nb.cells.append(nbformat.v4.new_code_cell(source, execution_count=i + 1, outputs=outputs))
    nbformat.write(nb, folder / "causes.ipynb")
    report = build_dataset(
        [folder / "causes.ipynb"],
        root / "dataset",
        snapshot_dir=root / "snapshots",
        progress=False,
        cell_timeout=CELL_TIMEOUT_S,
    )
    assert len(report.built) == 1 and not report.failed, report
    return {"root": root, "dataset": root / "dataset", "report": report, "folder": folder}


def _trajectory(built: dict[str, Any]) -> Trajectory:
    (trajectory,) = read_trajectories(built["dataset"])
    return trajectory


def test_each_cell_gets_the_cause_it_was_labelled_with(built: dict[str, Any]) -> None:
    steps = _trajectory(built).steps
    got = [(s.index, s.agreement_kind) for s in steps]
    assert got == [(i, label) for i, (_, _, label) in enumerate(CELLS)]
    assert all(s.agreement_kind for s in steps) and all(bool(s.agreement_detail) == (not s.agrees) for s in steps)


def test_the_details_name_what_a_reader_needs(built: dict[str, Any]) -> None:
    trajectory = _trajectory(built)
    detail = {s.index: s.agreement_detail or "" for s in trajectory.steps}
    assert trajectory.package_drift["numpy"][0] == "1.21.6"  # the requirements file beside the notebook
    assert "numpy 1.21.6 ->" in detail[3]
    assert detail[5].startswith("inputs from step 4 (missing-module) wrote 'sns'")
    assert "step 6 (missing-file) wrote 'sales'" in detail[7]
    assert "step 9 (its values differ when replayed again) wrote 'weights'" in detail[10]
    assert "a second replay differs" in detail[2]
    assert "--cell-timeout" in detail[18] and f"{CELL_TIMEOUT_S:g} s" in detail[18]
    assert "FutureWarning" in detail[1]
    steps = trajectory.steps
    assert steps[2].replay_stable is False and steps[2].second_outputs
    assert steps[3].replay_stable is True and steps[12].replay_stable is True  # seeded: the same draw again
    assert steps[9].replay_stable is False  # its values, checked for the cell that read them
    assert all(s.limit_s == CELL_TIMEOUT_S for s in steps)
    assert built["report"].cut == {trajectory.id: [18]}


def test_the_causes_match_the_labels_on_every_disagreeing_cell(built: dict[str, Any]) -> None:
    """The figure the issue asks for, on our own cells: causes that match independent labels."""
    steps = _trajectory(built).steps
    disagreeing = [(s, label) for s, (_, _, label) in zip(steps, CELLS, strict=True) if label in DISAGREEMENTS]
    matched = sum(s.agreement_kind == label for s, label in disagreeing)
    assert matched == len(disagreeing) == 15


def test_data_info_shows_causes_per_source_and_the_split_figure(built: dict[str, Any]) -> None:
    info = dataset_info(built["dataset"])
    assert info["agreement_split"] == {
        "agrees": pytest.approx(4 / 19),
        "tolerated": pytest.approx(2 / 19),
        "disagrees": pytest.approx(13 / 19),
    }
    source = str(built["folder"] / "causes.ipynb")
    assert info["kinds_by_source"][source]["upstream"] == 3
    result = CliRunner().invoke(app, ["data", "info", str(built["dataset"])])
    assert result.exit_code == 0, result.output
    assert "tolerated" in result.output and "upstream" in result.output and "causes.ipynb" in result.output
    as_json = json.loads(CliRunner().invoke(app, ["data", "info", str(built["dataset"]), "--json"]).output)
    assert as_json["agreement_kinds"]["environment"] == 3


def _june_rows(cells: list[tuple[str, float, str]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, (source, seconds, output) in enumerate(cells):
        start = 10 * i
        base = {"session_id": "s", "kernel_id": "k-long", "notebook_name": "long.ipynb", "cell_type": "code"}
        cell = {"cell_index": f"{i:032x}", "cell_num": float(i), "cell_source": source, "user_id": "u", "expert": False}
        outputs = [{"output_type": "stream", "name": "stdout", "text": output}] if output else []
        rows.append(
            {**base, **cell, "action_id": 2 * i, "time": f"2023-05-06 10:00:{start:02d}.000", "event": "execute",
             "cell_output": None}
        )  # fmt: skip
        finish = f"2023-05-06 10:00:{start + int(seconds):02d}.{int(seconds % 1 * 1000):03d}"
        rows.append(
            {
                **base,
                **cell,
                "action_id": 2 * i + 1,
                "time": finish,
                "event": "finished_execute",
                "cell_output": outputs,
            }
        )
    return rows


def test_a_cell_gets_a_multiple_of_its_recorded_time_and_a_cut_one_says_how_to_rebuild(tmp_path: Path) -> None:
    """The floor (--timeout) is 5 s here: a cell recorded at 2 s gets 10 s and runs its 6 s; one recorded at
    0.1 s that now takes 8 s is cut at the floor, labelled ``timeout``, and the message says what to run."""
    log = tmp_path / "long.jsonl"
    cells = [
        ("import time", 0.1, ""),
        ("time.sleep(6)\nprint('fitted')", 2.0, "fitted\n"),
        ("time.sleep(8)\nprint('done')", 0.1, "done\n"),
    ]
    log.write_text("".join(json.dumps(row) + "\n" for row in _june_rows(cells)))
    out = tmp_path / "dataset"
    result = CliRunner().invoke(app, ["data", "build", str(log), "--out", str(out), "--timeout", "5", "--no-snapshots"])
    assert result.exit_code == 0, result.output
    (trajectory,) = read_trajectories(out)
    assert [s.limit_s for s in trajectory.steps] == [5.0, 10.0, 5.0]
    assert [s.agreement_kind for s in trajectory.steps] == ["ok", "ok", "timeout"]
    assert "1 cells ran past their limit" in result.output and "--cell-timeout 600" in " ".join(result.output.split())
    # the same build with a longer limit replays the cut session again, and nothing is cut
    limits = SandboxLimits(timeout_s=5)
    again = build_dataset([log], out, snapshots=False, progress=False, cell_timeout=12, limits=limits)
    assert again.built and not again.cut
    (trajectory,) = read_trajectories(out)
    assert [s.agreement_kind for s in trajectory.steps] == ["ok", "ok", "ok"]


def test_samples_are_kept_or_dropped_by_the_cause_of_their_step(built: dict[str, Any]) -> None:
    trajectories = read_trajectories(built["dataset"])
    everything = {"max_length_quantile": None, "drop_empty": False}
    default = sample_counts(trajectories, "output", SampleRule(**everything))
    assert default.disagreeing == 15 and default.by_cause["upstream"] == 3 and default.by_cause["timing"] == 1
    assert sample_counts(trajectories, "next-cell", SampleRule(**everything)).disagreeing == 0  # the person's code
    lenient = SampleRule(**everything, drop_output_causes=DISAGREEMENTS - {"warning", "display"})
    kept = {s.step for s in make_samples(trajectories, "output", lenient)}
    assert {1, 14} <= kept and not kept & {2, 8}  # warning, display kept; random, timed dropped
    strict = SampleRule(**everything, drop_next_cell_causes=frozenset({"missing-module", "upstream"}))
    counts = sample_counts(trajectories, "next-cell", strict)
    assert counts.by_cause == {"missing-module": 1, "upstream": 3}
    with pytest.raises(ValueError, match="unknown cause 'random'"):
        SampleRule(drop_output_causes=frozenset({"random"}))
    assert dataset_info(built["dataset"])["samples_dropped_by_cause"]["output"]["nondeterminism"] == 1
