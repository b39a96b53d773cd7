"""The experiment runner: results as they finish, resume after a kill, workers, configs, CLI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.errors import ConfigError
from themisto_env.run.config import RunConfig, load_run_config
from themisto_env.run.results import RESULTS, SUMMARY, read_results
from themisto_env.run.runner import run


def _config(env_dataset: dict[str, str], **kw: object) -> RunConfig:
    return RunConfig(data=env_dataset["dataset"], env={"snapshot_dir": env_dataset["snapshot_dir"]}, **kw)


def test_run_writes_a_row_per_sample_and_a_summary(env_dataset: dict[str, str], tmp_path: Path) -> None:
    summary = run(_config(env_dataset, agent="repeat-previous"), tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert len(rows) == summary["samples"] > 0
    assert len({r.sample_id for r in rows}) == len(rows)
    written = json.loads((tmp_path / RESULTS).read_text().splitlines()[0])
    assert written == rows[0].to_dict(), "results.jsonl holds the rows' dict form"
    assert {"sample_id", "prediction", "target", "scores", "tool_calls", "usage", "seconds"} <= set(written)
    mean = sum(r.scores["rouge_l"] for r in rows) / len(rows)
    assert summary["rouge_l"]["mean"] == pytest.approx(mean)
    assert summary["rouge_l"]["ci_low"] <= mean <= summary["rouge_l"]["ci_high"]
    assert json.loads((tmp_path / SUMMARY).read_text()) == summary


def test_a_killed_run_resumes_without_loss_or_duplicates(env_dataset: dict[str, str], tmp_path: Path) -> None:
    full = tmp_path / "full"
    run(_config(env_dataset), full, progress=False)
    expected = [r.sample_id for r in read_results(full)]
    killed = tmp_path / "killed"
    killed.mkdir()
    lines = (full / RESULTS).read_text().splitlines(keepends=True)
    (killed / RESULTS).write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # torn mid-line
    run(_config(env_dataset), killed, progress=False)
    resumed = read_results(killed)
    assert sorted(r.sample_id for r in resumed) == sorted(expected)
    assert [r.sample_id for r in resumed[:3]] == expected[:3], "rows written before the kill are kept"


def test_two_workers_score_the_same_samples(env_dataset: dict[str, str], tmp_path: Path) -> None:
    one = run(_config(env_dataset, task="output"), tmp_path / "one", progress=False)
    two = run(_config(env_dataset, task="output", workers=2), tmp_path / "two", progress=False)
    assert one["samples"] == two["samples"]
    assert one["rouge_l"]["mean"] == pytest.approx(two["rouge_l"]["mean"])


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent: repeat-previous\ntaks: output\n")
    with pytest.raises(ConfigError, match="taks"):
        load_run_config(bad)
    bad.write_text("task: everything\n")
    with pytest.raises(ConfigError, match="task"):
        load_run_config(bad)


def test_cli_run_prints_a_summary_table(env_dataset: dict[str, str], tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"agent: retrieval\nenv:\n  snapshot_dir: {env_dataset['snapshot_dir']}\n")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--config",
            str(config),
            "--data",
            env_dataset["dataset"],
            "--limit",
            "3",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "rouge_l" in result.output and "retrieval" in result.output
    assert len(read_results(tmp_path / "r")) == 3


# -- the parts: the executor a config chooses, the one episode loop run in place -------------------------------------


def test_the_config_chooses_the_executor() -> None:
    from themisto_env.run.executors import executor_for, serial_rows
    from themisto_env.run.executors.concurrent import concurrent_rows
    from themisto_env.run.executors.processes import process_rows
    from themisto_env.run.executors.ray_actors import ray_rows

    assert executor_for(RunConfig()) is serial_rows
    assert executor_for(RunConfig(max_connections=4)) is concurrent_rows
    assert executor_for(RunConfig(workers=2)) is process_rows
    assert executor_for(RunConfig(workers=2, ray="local")) is ray_rows


def test_the_episode_loop_runs_in_place_without_an_event_loop_and_is_closed_with_its_rows() -> None:
    import asyncio

    from themisto_env.run.rollout import in_place, run_in_place

    events: list[str] = []

    def blocking(n: int) -> int:  # as an agent's act or an env step: no event loop is running
        with pytest.raises(RuntimeError, match="no running event loop"):
            asyncio.get_running_loop()
        return n

    async def rows() -> AsyncIterator[int]:
        try:
            for n in range(3):
                yield await in_place(blocking, n)
                events.append(f"after {n}")
        finally:
            events.append("closed")

    assert list(run_in_place(rows())) == [0, 1, 2] and events[-1] == "closed"
    events.clear()
    taken = run_in_place(rows())
    assert next(taken) == 0
    taken.close()  # the run stops early: the loop's own cleanup runs
    assert events == ["closed"]

    async def suspends() -> AsyncIterator[int]:
        await asyncio.sleep(0)  # needs an event loop
        yield 1

    with pytest.raises(RuntimeError, match="needs an event loop"):
        next(run_in_place(suspends()))
