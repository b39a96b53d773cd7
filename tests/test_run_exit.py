"""``themisto run`` fails (exit 1, one line) when nothing was scored or too many samples failed (issue 22).

The model is the real langchain-openai client against the stand-in server of test_provider_errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.agents.test_provider_errors import StandIn, cli, config, error, ok

pytest.importorskip("langchain_openai")


@pytest.fixture(scope="module")
def server() -> Any:
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


def _config_file(server: StandIn, env_dataset: dict[str, str], tmp_path: Path) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config(server, env_dataset).model_dump(exclude_defaults=True)))
    return str(path)


def test_a_run_that_scored_nothing_exits_1_with_one_line(
    server: StandIn,
    env_dataset: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.play(default=error(401, "invalid api key"))  # every call fails, never retried; no --fail-on-error
    args = ["run", "-c", _config_file(server, env_dataset, tmp_path), "--limit", "3", "--out", str(tmp_path / "o")]
    code, err = cli(monkeypatch, capsys, *args)
    assert code == 1, err
    assert err.strip().splitlines()[-1].startswith("error: nothing was scored (3 model errors)"), err
    assert "Traceback" not in err
    assert (tmp_path / "o" / "summary.json").exists()  # the summary is still written


def test_fail_on_error_is_judged_at_the_end_too(
    server: StandIn,
    env_dataset: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two failures then a success: no row stops the run (its last row is fine), but 2 of 3 > 0.5."""
    server.play(error(400, "bad"), error(400, "bad"), default=ok())
    args = ["run", "-c", _config_file(server, env_dataset, tmp_path), "--limit", "3", "--fail-on-error", "0.5"]
    code, err = cli(monkeypatch, capsys, *args, "--out", str(tmp_path / "o"))
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: 2 of 3 samples failed in their model calls (67% > --fail-on-error 0.5)")


def test_a_run_that_scored_something_exits_0(
    server: StandIn,
    env_dataset: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.play(error(400, "bad"), default=ok())  # 1 of 3 failed: under --fail-on-error 0.5
    args = ["run", "-c", _config_file(server, env_dataset, tmp_path), "--limit", "3", "--fail-on-error", "0.5"]
    code, err = cli(monkeypatch, capsys, *args, "--out", str(tmp_path / "o"))
    assert code == 0, err
