"""Multi-turn RL: the env under gymnasium's own vector envs (sync and async), batched actions, turns."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from themisto_env.env.actions import Action, Prediction, encode_action
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall


def batched(envs: gym.vector.VectorEnv, actions: list[Action]) -> dict:
    """One action per copy as the vector env's action, as docs/rl.md shows it."""
    space = envs.single_action_space
    return concatenate(space, [encode_action(a) for a in actions], create_empty_array(space, len(actions)))


def per_copy(infos: dict, n: int) -> list[dict]:
    """The batched info as one dict per copy: the keys each copy set (gymnasium's ``_key`` masks)."""
    out: list[dict] = [{} for _ in range(n)]
    for key, values in infos.items():
        if not key.startswith("_"):
            for i in np.flatnonzero(infos[f"_{key}"]):
                out[i][key] = per_copy(values, n)[i] if isinstance(values, dict) else values[i]
    return out


@pytest.mark.parametrize("vectorization", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_tool_calls_and_predictions_in_a_batch(env_dataset: dict[str, str], vectorization: str) -> None:
    envs = gym.make_vec(
        "themisto/OutputPrediction-v0",
        num_envs=2,
        vectorization_mode=vectorization,
        observation="tools",
        tool_budget=2,
        tool_cost=0.05,
        **env_dataset,
    )
    try:
        obs, _ = envs.reset(seed=[0, 1])
        assert [int(o["tools_left"]) for o in iterate(envs.observation_space, obs)] == [2, 2]
        # turn 1: copy 0 calls a tool, copy 1 predicts
        obs, rewards, terminated, truncated, infos = envs.step(
            batched(envs, [ToolCall(tool="list_variables"), Prediction(text="")])
        )
        info = per_copy(infos, 2)
        first_scored = info[1]["scored_sample_id"]
        assert rewards[0] == pytest.approx(-0.05) and 0.0 <= rewards[1] <= 1.0
        assert "scores" not in info[0] and set(info[1]["scores"]) == {"exact_match", "rouge_l", "chrf"}
        first = list(iterate(envs.observation_space, obs))
        assert first[0]["tools_left"] == 1 and first[0]["tool_result"]  # the tool's answer
        assert first[1]["tools_left"] == 2  # a new sample: the budget is back
        # turn 2: copy 0 now predicts (the same sample as copy 1's first)
        _, rewards, *_, infos = envs.step(batched(envs, [Prediction(text=""), Prediction(text="")]))
        info = per_copy(infos, 2)
        assert info[0]["scored_sample_id"] == first_scored  # one trajectory: both copies start there
        assert info[1]["scored_sample_id"] != first_scored
        assert all(0.0 <= r <= 1.0 for r in rewards)
        assert not terminated.any() and not truncated.any()
    finally:
        envs.close()


def test_same_step_autoreset_scores_each_sample_once_per_episode(env_dataset: dict[str, str]) -> None:
    env = ThemistoEnv(task="next-cell", observation="static", **env_dataset)
    expected = [s.id for s in env.episode.samples]
    env.close()
    envs = gym.make_vec(
        "themisto/NextCell-v0",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        observation="static",
        **env_dataset,
    )
    try:
        envs.reset(seed=[0, 1])
        scored: list[list[str]] = [[], []]
        for _ in range(len(expected)):
            obs, rewards, terminated, _, infos = envs.step(batched(envs, [Prediction(text="")] * 2))
            for i, info in enumerate(per_copy(infos, 2)):
                sid = info.get("scored_sample_id") or info["final_info"]["scored_sample_id"]
                scored[i].append(sid)
        assert scored == [expected, expected]
        assert terminated.all()  # both copies ended their episode on the last sample ...
        assert np.all(np.asarray(obs["tools_left"]) >= 0)  # ... and already show the next episode's
    finally:
        envs.close()
