"""themisto eval-set on the bundled data: six settings, their table as data, resume (and after a kill),
compare with three runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.errors import ConfigError
from themisto_env.metrics import METRICS
from themisto_env.run.evalset import DONE, GRID, load_eval_set_config
from themisto_env.run.results import RESULTS, read_results

REPO = Path(__file__).resolve().parents[2]
LIMIT = 6


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(app, ["eval-set", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The offline config's six settings on a few bundled samples each."""
    out = tmp_path_factory.mktemp("eval-set")
    shown = _invoke("--config", str(REPO / "configs/eval-set-offline.yaml"), "--limit", str(LIMIT), "--out", str(out))
    return out, shown


@pytest.mark.slow
def test_the_table_has_a_row_per_setting(grid: tuple[Path, str]) -> None:
    out, shown = grid
    rows = json.loads((out / GRID).read_text())["rows"]
    assert [(r["task"], r["observation"]) for r in rows] == [
        (task, mode) for task in ("next-cell", "output") for mode in ("static", "full", "tools")
    ]
    for row in rows:
        assert row["agent"] == "runtime-state" and row["status"] == "ran" and row["samples"] == LIMIT
        for figure in (*METRICS, "reward", "tool_calls", "tokens"):
            assert row[figure]["ci_low"] <= row[figure]["mean"] <= row[figure]["ci_high"], figure
        assert len(read_results(out / row["run"])) == LIMIT
    assert shown.count("runtime-state ") >= 6 and "exact_match" in shown and "tool calls" in shown
    assert (out / "report.html").read_text().count("data:image/png;base64,") == 1
    assert "tools - static" in (out / "eval-set.md").read_text()


@pytest.mark.slow
def test_a_second_invocation_skips_finished_settings_and_resumes_a_killed_one(grid: tuple[Path, str]) -> None:
    out, _ = grid
    again = _invoke("--config", str(REPO / "configs/eval-set-offline.yaml"), "--limit", str(LIMIT), "--out", str(out))
    assert again.count("skipped") == 6 and "  ran " not in again
    killed = out / "output-tools-runtime-state"
    lines = (killed / RESULTS).read_text().splitlines(keepends=True)
    (killed / RESULTS).write_text("".join(lines[:2]) + lines[2][:40])  # torn mid-row, as a kill leaves it
    (killed / DONE).unlink(missing_ok=True)
    resumed = _invoke("--config", str(REPO / "configs/eval-set-offline.yaml"), "--limit", str(LIMIT), "--out", str(out))
    assert resumed.count("skipped") == 5 and "ran     runtime-state on output (tools)" in resumed
    rows = read_results(killed)
    assert len(rows) == len({r.sample_id for r in rows}) == LIMIT
    assert [r.sample_id for r in rows[:2]] == [json.loads(line)["sample_id"] for line in lines[:2]]


@pytest.mark.slow
def test_compare_takes_three_runs(grid: tuple[Path, str]) -> None:
    out, _ = grid
    runs = [str(out / f"output-{mode}-runtime-state") for mode in ("static", "full", "tools")]
    shown = CliRunner().invoke(app, ["compare", *runs])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("A = runtime-state (static)") == 2
    data = json.loads(CliRunner().invoke(app, ["compare", *runs, "--json"]).output)
    assert [r["label"] for r in data["runs"]] == [f"runtime-state ({m})" for m in ("static", "full", "tools")]
    assert len(data["pairs"]) == 2 and all(p["shared_samples"] == LIMIT for p in data["pairs"])
    assert set(data["pairs"][0]["per_sample"]) == {"reward", "tool_calls", "tokens"}
    two = json.loads(CliRunner().invoke(app, ["compare", *runs[:2], "--json"]).output)
    assert two["a"] == "runtime-state (static)" and "metrics" in two, "two runs print their pair, as before"
    one = CliRunner().invoke(app, ["compare", runs[0]])
    assert one.exit_code != 0


def test_an_eval_set_config_is_validated_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "grid.yaml"
    bad.write_text("agent: [runtime-state]\nobservation: [static, fulll]\n")
    with pytest.raises(ConfigError, match="observation"):
        load_eval_set_config(bad)
    bad.write_text("agent: [runtime-state]\nlimt: 3\n")
    with pytest.raises(ConfigError, match="limt"):
        load_eval_set_config(bad)
    grid = load_eval_set_config(None, {"agent": ["llm-{observation}"], "task": "output", "model": "fake"})
    assert [(s.agent, s.family) for s in grid.settings()] == [
        ("llm-static", "llm-{observation}"),
        ("llm-full", "llm-{observation}"),
        ("llm-tools", "llm-{observation}"),
    ]
    assert [s.folder for s in grid.settings()] == [
        "output-static-llm-static",
        "output-full-llm-full",
        "output-tools-llm-tools",
    ]


@pytest.mark.slow
def test_an_eval_set_killed_midway_resumes_to_the_clean_runs_table(grid: tuple[Path, str], tmp_path: Path) -> None:
    """SIGKILL the whole command (and its kernels) while a setting is half written; the same command again
    finishes the grid, and every row equals the uninterrupted run's."""
    out = tmp_path / "killed"
    args = ["--config", str(REPO / "configs/eval-set-offline.yaml"), "--limit", str(LIMIT), "--out", str(out)]
    command = [sys.executable, "-c", "from themisto_env.cli import main; main()", "eval-set", *args, "--max-runs", "1"]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            written = [p for p in out.glob(f"*/{RESULTS}") if p.read_text().count("\n") >= 2]
            if any(not (p.parent / DONE).exists() for p in written):
                break
            time.sleep(0.05)
        assert process.poll() is None, "the grid ended before it could be killed"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not (out / GRID).exists()
    _invoke(*args)
    clean = json.loads((grid[0] / GRID).read_text())["rows"]
    resumed = json.loads((out / GRID).read_text())["rows"]
    figures = ("agent", "task", "observation", "samples", *METRICS, "reward", "tool_calls")
    assert [{k: r[k] for k in figures} for r in resumed] == [{k: r[k] for k in figures} for r in clean]
