"""Building data from several sources: past a bad one (reported), what the rule kept of each, no empty
folder left when nothing could be built (issue 22)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from typer.testing import CliRunner

from tests.env_fixtures import write_notebook
from themisto_env.cli import app


def _short_notebook(path: Path, cells: int = 2) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"x{i} = {i}", execution_count=i + 1) for i in range(cells)]
    nbformat.write(nb, path)
    return path


def test_a_build_goes_past_a_bad_source_and_says_what_each_rule_kept(tmp_path: Path) -> None:
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
    lines = {line.strip().split(":")[0]: line for line in result.output.splitlines() if line.startswith("  ")}
    short = lines[str(src / "short.ipynb")]
    assert "next-cell 0 kept (dropped: 1 in sessions under 5 executions)" in short, short
    assert "output 0 kept (dropped: 2 in sessions under 5 executions)" in short, short
    sales = lines[str(src / "sales.ipynb")]
    assert "next-cell " in sales and " kept" in sales and "next-cell 0 kept" not in sales, sales
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
