"""``themisto run`` fails (exit 1, one line) when nothing was scored or too many samples failed (issue 22).

The model is the real langchain-openai client against the stand-in server of test_provider_errors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.agents.stand_in import StandIn, error, ok
from tests.agents.test_provider_errors import cli, config
from themisto_env.cli import main

pytest.importorskip("langchain_openai")


@pytest.fixture(scope="module")
def server() -> Any:
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


@pytest.fixture
def run_args(server: StandIn, env_dataset: dict[str, str], tmp_path: Path) -> list[str]:
    """``themisto run`` over the stand-in model: its config file and an output folder (``tmp_path / "o"``)."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config(server, env_dataset).model_dump(exclude_defaults=True)))
    return ["run", "-c", str(path), "--out", str(tmp_path / "o")]


def test_a_run_that_scored_nothing_exits_1_with_one_line(
    server: StandIn,
    run_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.play(default=error(401, "invalid api key"))  # every call fails, never retried; no --fail-on-error
    code, err = cli(monkeypatch, capsys, *run_args, "--limit", "3")
    assert code == 1, err
    assert err.strip().splitlines()[-1].startswith("error: nothing was scored (3 model errors)"), err
    assert "Traceback" not in err
    assert (tmp_path / "o" / "summary.json").exists()  # the summary is still written


def test_fail_on_error_is_judged_at_the_end_too(
    server: StandIn,
    run_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two failures then a success: no row stops the run (its last row is fine), but 2 of 3 > 0.5."""
    server.play(error(400, "bad"), error(400, "bad"), default=ok())
    code, err = cli(monkeypatch, capsys, *run_args, "--limit", "3", "--fail-on-error", "0.5")
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: 2 of 3 samples failed in their model calls (67% > --fail-on-error 0.5)")


def test_a_run_that_scored_something_exits_0(
    server: StandIn,
    run_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.play(error(400, "bad"), default=ok())  # 1 of 3 failed: under --fail-on-error 0.5
    code, err = cli(monkeypatch, capsys, *run_args, "--limit", "3", "--fail-on-error", "0.5")
    assert code == 0, err


def test_retries_after_a_rate_limit_are_counted_and_shown(
    server: StandIn,
    run_args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    server.play(error(429, "slow down", retry_after="0"), error(500, "oops"), default=ok())
    monkeypatch.setattr(sys, "argv", ["themisto", *run_args, "--limit", "2"])
    with pytest.raises(SystemExit) as caught:
        main()
    assert not caught.value.code
    usage = json.loads((tmp_path / "o" / "summary.json").read_text())["usage"]
    assert usage["retries"] == 2 and usage["rate_limited"] == 1 and usage["model_calls"] == 2
    printed = " ".join(capsys.readouterr().out.split())
    assert "2 calls retried, 1 after a rate limit (429)" in printed, printed


def test_help_is_not_cut_at_80_columns_when_piped() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", "from themisto_env.cli import main; main()", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "COLUMNS")},
    )
    assert done.returncode == 0, done.stderr
    assert "path/to/my_agents.py:Class" in done.stdout and "…" not in done.stdout
    assert max(map(len, done.stdout.splitlines())) > 80
