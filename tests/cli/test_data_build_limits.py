"""``themisto data build``: the least time a cell gets and the helper-call limit are two options; ``--timeout``,
which set both, still works and says it is deprecated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.agents.test_provider_errors import cli
from tests.replay.test_agreement_causes import _june_rows
from themisto_env.cli import app
from themisto_env.data.trajectory import read_trajectories


def build(tmp_path: Path, *options: str) -> tuple[list[float | None], str]:
    """Build a two-cell log (each recorded at 0.1 s) with ``options``: each step's limit, and the output."""
    log = tmp_path / "short.jsonl"
    rows = _june_rows([("x = 1", 0.1, ""), ("print(x)", 0.1, "1\n")])
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / f"dataset-{len(list(tmp_path.iterdir()))}"
    result = CliRunner().invoke(app, ["data", "build", str(log), "--out", str(out), "--no-snapshots", *options])
    assert result.exit_code == 0, result.output
    (trajectory,) = read_trajectories(out)
    return [step.limit_s for step in trajectory.steps], result.output


@pytest.mark.slow  # three builds, a kernel each
def test_the_cell_floor_and_the_helper_limit_are_separate_and_timeout_is_a_deprecated_alias(tmp_path: Path) -> None:
    limits, _ = build(tmp_path, "--helper-timeout", "7")
    assert limits == [60.0, 60.0], "the helper-call limit is not the least time a cell gets"
    limits, output = build(tmp_path, "--min-cell-timeout", "5", "--helper-timeout", "30")
    assert limits == [5.0, 5.0] and "deprecated" not in output
    limits, output = build(tmp_path, "--timeout", "5")
    assert limits == [5.0, 5.0], "--timeout still sets the least time a cell gets"
    assert "--timeout is deprecated" in output and "--min-cell-timeout" in output and "--helper-timeout" in output


@pytest.mark.parametrize("option", ["--min-cell-timeout", "--helper-timeout", "--timeout"])
def test_a_limit_that_is_no_time_is_one_line(
    tmp_path: Path, option: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = cli(monkeypatch, capsys, "data", "build", str(tmp_path), "--out", str(tmp_path / "out"), option, "0")
    lines = [line for line in err.splitlines() if "deprecated" not in line]
    assert code != 0 and len(lines) == 1 and "give a number of seconds above 0" in lines[0], err
    assert not (tmp_path / "out").exists()


def test_help_names_both_limits() -> None:
    result = CliRunner().invoke(app, ["data", "build", "--help"], terminal_width=200)
    assert "--min-cell-timeout" in result.output and "--helper-timeout" in result.output
