"""Multi-turn RL: the env under gymnasium.vector (sync and async), batched actions, the turn structure."""

from __future__ import annotations

import numpy as np
import pytest

from themisto_env.bridges.rl import make_vector_env
from themisto_env.bridges.rl.vector import batch_actions, unbatch_info, unbatch_observations
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall


@pytest.mark.parametrize("vectorization", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_tool_calls_and_predictions_in_a_batch(env_dataset: dict[str, str], vectorization: str) -> None:
    envs = make_vector_env(
        2,
        task="output",
        vectorization=vectorization,
        observation="tools",
        tool_budget=2,
        tool_cost=0.05,
        **env_dataset,
    )
    try:
        obs, _ = envs.reset(seed=[0, 1])
        assert [o["tools_left"] for o in unbatch_observations(obs)] == [2, 2]
        # turn 1: copy 0 calls a tool, copy 1 predicts
        obs, rewards, terminated, truncated, infos = envs.step(
            batch_actions([ToolCall(tool="list_variables"), Prediction(text="")])
        )
        per_copy = unbatch_info(infos, 2)
        first_scored = per_copy[1]["scored_sample_id"]
        assert rewards[0] == pytest.approx(-0.05) and 0.0 <= rewards[1] <= 1.0
        assert "scores" not in per_copy[0] and set(per_copy[1]["scores"]) == {"exact_match", "rouge_l", "chrf"}
        first = unbatch_observations(obs)
        assert first[0]["tools_left"] == 1 and first[0]["tool_result"]  # the tool's answer
        assert first[1]["tools_left"] == 2  # a new sample: the budget is back
        # turn 2: copy 0 now predicts (the same sample as copy 1's first)
        _, rewards, *_, infos = envs.step(batch_actions([Prediction(text=""), Prediction(text="")]))
        per_copy = unbatch_info(infos, 2)
        assert per_copy[0]["scored_sample_id"] == first_scored  # one trajectory: both copies start there
        assert per_copy[1]["scored_sample_id"] != first_scored
        assert all(0.0 <= r <= 1.0 for r in rewards)
        assert not terminated.any() and not truncated.any()
    finally:
        envs.close()


def test_same_step_autoreset_scores_each_sample_once_per_episode(env_dataset: dict[str, str]) -> None:
    env = ThemistoEnv(task="next-cell", observation="static", **env_dataset)
    expected = [s.id for s in env.episode.samples]
    env.close()
    envs = make_vector_env(2, task="next-cell", autoreset="same-step", observation="static", **env_dataset)
    try:
        envs.reset(seed=[0, 1])
        scored: list[list[str]] = [[], []]
        for _ in range(len(expected)):
            obs, rewards, terminated, _, infos = envs.step(batch_actions([Prediction(text="")] * 2))
            for i, info in enumerate(unbatch_info(infos, 2)):
                sid = info.get("scored_sample_id") or info["final_info"]["scored_sample_id"]
                scored[i].append(sid)
        assert scored == [expected, expected]
        assert terminated.all()  # both copies ended their episode on the last sample ...
        assert np.all(np.asarray(obs["tools_left"]) >= 0)  # ... and already show the next episode's
    finally:
        envs.close()
