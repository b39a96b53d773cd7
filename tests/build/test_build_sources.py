"""Building data from several sources: past a bad one (reported), what the rule kept of each notebook, no empty
folder left when nothing could be built (issue 22)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from typer.testing import CliRunner

from tests.env_fixtures import write_notebook
from themisto_env.cli import app
from themisto_env.data.corpus import corpus_table
from themisto_env.data.trajectory import read_trajectories


def _short_notebook(path: Path, cells: int = 2) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"x{i} = {i}", execution_count=i + 1) for i in range(cells)]
    nbformat.write(nb, path)
    return path


def test_a_build_goes_past_a_bad_source_and_says_what_the_rule_kept(tmp_path: Path) -> None:
    src = tmp_path / "notebooks"
    src.mkdir()
    write_notebook(src / "sales.ipynb")
    _short_notebook(src / "short.ipynb")
    (src / "broken.ipynb").write_text('{"cells": [')
    out = tmp_path / "dataset"
    result = CliRunner().invoke(app, ["data", "build", str(src), "--out", str(out), "--no-snapshots"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "built 2," in text
    assert f"not read {src / 'broken.ipynb'}: not a readable notebook" in result.output
    total = corpus_table(read_trajectories(out)).total
    kept = "; ".join(f"{t} {total.kept[t]} kept, {total.dropped_total(t)} dropped" for t in ("next-cell", "output"))
    assert kept in text and total.kept["next-cell"] > 0, text
    assert "short-session 1" in text.split("largest drop causes: next-cell:")[1].split(";")[0], text
    table = result.output[result.output.index("samples per notebook") :]
    assert "short.ipynb" in table and "sales.ipynb" in table and "broken" not in table
    assert (out / "trajectories.jsonl").exists()


def test_nothing_readable_is_one_line_and_no_folder(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_text("not json")
    out = tmp_path / "dataset"
    result = CliRunner().invoke(app, ["data", "build", str(tmp_path / "broken.ipynb"), "--out", str(out)])
    assert result.exit_code == 1
    assert "nothing to build" in str(result.exception) and "broken.ipynb" in str(result.exception)
    assert not out.exists()


def test_a_build_that_fails_before_any_trajectory_leaves_no_folder(tmp_path: Path) -> None:
    """A kernel backend that cannot start: the folder made for the build is removed again."""
    write_notebook(tmp_path / "sales.ipynb")
    out = tmp_path / "dataset"
    result = CliRunner().invoke(
        app, ["data", "build", str(tmp_path / "sales.ipynb"), "--out", str(out), "--backend", "nosuch"]
    )
    assert result.exit_code == 1
    assert not out.exists()
