"""Single-turn export: the rows are the env's samples, with prompts built from the env's observations."""

from __future__ import annotations

from typing import Any

import pytest

from themisto_env.bridges.rl import export_dataset
from themisto_env.bridges.rl.export import export_samples, observation_prompt
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import ConfigError


def _env_observations(env: ThemistoEnv) -> dict[str, dict[str, Any]]:
    """What the env itself shows at every sample, walking each trajectory with empty predictions."""
    seen: dict[str, dict[str, Any]] = {}
    for tid in env.episode.episode_ids:
        obs, _ = env.reset(options={"trajectory": tid})
        terminated = False
        while not terminated:
            seen[env.episode.current_sample.id] = obs
            obs, _, terminated, _, _ = env.step(Prediction(text=""))
    return seen


@pytest.mark.parametrize("task", ["next-cell", "output"])
def test_rows_are_the_env_samples_with_the_env_observation(env_dataset: dict[str, str], task: str) -> None:
    rows = export_samples(task, "static", history_length=3, **env_dataset)
    env = ThemistoEnv(task=task, observation="static", history_length=3, **env_dataset)
    try:
        observations = _env_observations(env)
    finally:
        env.close()
    assert [r["sample_id"] for r in rows] == [s.id for s in env.episode.samples]
    assert [r["target"] for r in rows] == [s.target for s in env.episode.samples]
    for row in rows:
        obs = observations[row["sample_id"]]
        assert row["history"] == obs["history"] and row["cell"] == obs["cell"]
        assert row["prompt"] == observation_prompt(obs, task, "static")
        assert row["task"] == task and row["observation_mode"] == "static"
        assert row["metadata"]["history_length"] == 3
        assert row["target"] not in row["prompt"][1]["content"] or task == "output"  # never the answer


def test_text_prompts_and_the_hugging_face_dataset(env_dataset: dict[str, str]) -> None:
    rows = export_samples("output", "static", prompt_format="text", limit=4, **env_dataset)
    dataset = export_dataset("output", "static", prompt_format="text", limit=4, **env_dataset)
    assert len(dataset) == len(rows) == 4
    assert {"prompt", "target", "sample_id", "task", "trajectory_id", "step", "metadata"} <= set(dataset.column_names)
    assert dataset["sample_id"] == [r["sample_id"] for r in rows]
    assert dataset["prompt"] == [r["prompt"] for r in rows]
    assert all(isinstance(p, str) and r["cell"] in p for p, r in zip(dataset["prompt"], rows, strict=True))


def test_full_mode_walks_the_env_and_dumps_the_runtime(env_dataset: dict[str, str]) -> None:
    full = export_samples("output", "full", limit=3, **env_dataset)
    static = export_samples("output", "static", limit=3, **env_dataset)
    assert [r["sample_id"] for r in full] == [r["sample_id"] for r in static]
    assert [r["history"] for r in full] == [r["history"] for r in static]
    assert "Kernel memory" in full[-1]["runtime"]
    assert "Kernel memory" in full[-1]["prompt"][1]["content"]


def test_full_rows_show_the_runtime_the_env_shows(env_dataset: dict[str, str]) -> None:
    """The full rows' states are served by the env's state server: the dump is the gym env's, sample by sample."""
    rows = export_samples("next-cell", "full", limit=3, **env_dataset)
    env = ThemistoEnv(task="next-cell", observation="full", **env_dataset)
    try:
        for row in rows:
            obs, _ = env.reset(options={"sample": row["sample_id"]})
            assert row["runtime"] == obs["runtime"] and row["history"] == obs["history"], row["sample_id"]
    finally:
        env.close()
    assert any("Kernel memory" in row["runtime"] for row in rows)


def test_tools_mode_is_refused_with_the_alternative(env_dataset: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="make_vec"):
        export_samples("next-cell", "tools", **env_dataset)
