"""Fixtures of the agent tests: a small dataset built by the real builder, and real envs over it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import themisto_env  # noqa: F401  (registers the ids)
from tests.agents.sessions import write_log

ENV_IDS = {"next-cell": "themisto/NextCell-v0", "output": "themisto/OutputPrediction-v0"}

MakeEnv = Callable[..., gym.Env[dict[str, Any], dict[str, Any]]]


@pytest.fixture(scope="session")
def agents_dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The sessions of `tests.agents.sessions` replayed into a dataset, with a private snapshot store."""
    from themisto_env.build.builder import build_dataset

    root: Path = tmp_path_factory.mktemp("agents-dataset")
    log = write_log(root / "june.jsonl")
    report = build_dataset([log], root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert report.built and not report.failed, report
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


@pytest.fixture(scope="module")
def make_env(agents_dataset: dict[str, str]) -> Iterator[MakeEnv]:
    """``make_env(task, observation, **options)``: a real env over the agents' dataset, closed afterwards."""
    opened: list[gym.Env[dict[str, Any], dict[str, Any]]] = []

    def make(
        task: str = "output", observation: str = "tools", **options: Any
    ) -> gym.Env[dict[str, Any], dict[str, Any]]:
        env = gym.make(ENV_IDS[task], observation=observation, **{**agents_dataset, **options})
        opened.append(env)
        return env

    yield make
    for env in opened:
        env.close()
