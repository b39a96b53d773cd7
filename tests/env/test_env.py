"""The gymnasium environment on real kernels: API contract, episodes, tools, safety, recovery."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import themisto_env  # noqa: F401  (registers the ids)
from themisto_env.env.actions import Prediction, encode_action
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import TOOL_NAMES, TOOLS, ToolCall
from themisto_env.errors import ConfigError

ENV_IDS = ("themisto/NextCell-v0", "themisto/OutputPrediction-v0")


_OPEN: list[ThemistoEnv] = []


def make(env_dataset: dict[str, str], env_id: str = ENV_IDS[1], **options: object) -> ThemistoEnv:
    env = gym.make(env_id, **env_dataset, **options).unwrapped
    _OPEN.append(env)  # type: ignore[arg-type]
    return env  # type: ignore[return-value]


@pytest.fixture(autouse=True)
def _close_envs() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registered_ids_pass_the_gymnasium_checker(env_dataset: dict[str, str], env_id: str) -> None:
    env = make(env_dataset, env_id)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_an_episode_scores_every_sample_once_then_terminates(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset)
    obs, info = env.reset(seed=1)
    expected = [s.id for s in env.episode.samples]
    scored = []
    terminated = False
    while not terminated:
        assert env.observation_space.contains(obs)
        obs, reward, terminated, truncated, info = env.step(Prediction(text=""))
        assert 0.0 <= reward <= 1.0 and not truncated
        assert set(info["scores"]) == {"exact_match", "rouge_l", "chrf"}
        scored.append(info["scored_sample_id"])
    assert scored == expected
    env.close()


def test_a_perfect_prediction_gets_full_reward(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, "themisto/NextCell-v0")
    env.reset(options={"sample": 2})
    target = env.episode.current_sample.target
    _, reward, *_, info = env.step(Prediction(text=target))
    assert reward == pytest.approx(1.0)
    assert info["scores"]["exact_match"] == 1.0
    env.close()


def test_reset_at_a_sample_restores_a_snapshot_instead_of_replaying(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, "themisto/NextCell-v0")
    obs, info = env.reset(options={"sample": 5})
    kernel = env.episode.tool_context().kernel
    state = kernel.introspect.namespace_state()
    assert state.execution_count == 1, "no cell may be executed to reach a sample with a snapshot"
    assert {"sales", "total", "by_region"} <= set(state.names)
    assert info["step"] == env.episode.current_sample.step
    assert f"# In [{info['step']}]:" in obs["history"] and f"# In [{info['step'] + 1}]:" not in obs["history"]
    env.close()


def test_nothing_reachable_reveals_the_target(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, "themisto/NextCell-v0", history_length=100)
    obs, info = env.reset(options={"sample": 0})
    steps = env.episode.trajectories[info["trajectory_id"]].steps
    while True:
        sample = env.episode.current_sample
        later = [s.source for s in steps[sample.step :]]
        for text in (obs["history"], obs["runtime"], obs["tool_result"], repr(info)):
            for source in later:
                if source not in "".join(s.source for s in steps[: sample.step]):
                    assert source not in text, f"a future cell leaks at step {sample.step}"
        names = env.episode.tool_context().kernel.introspect.namespace_state().names
        created_by_target = set(steps[sample.step].variables) - set(steps[sample.step - 1].variables)
        assert not created_by_target & set(names), "the kernel already holds what the target creates"
        obs, _, terminated, _, info = env.step(Prediction(text="x"))
        if terminated:
            break
    env.close()


def test_tools_are_read_only_and_bounded(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, tool_budget=len(TOOL_NAMES) + 1)
    env.reset(options={"sample": 4})
    kernel = env.episode.tool_context().kernel
    before = kernel.introspect.namespace_state()
    calls = [
        ToolCall(tool="list_variables"),
        ToolCall(tool="inspect_variable", args={"name": "sales"}),
        ToolCall(tool="dataframe_head", args={"name": "sales", "n": 3}),
        ToolCall(tool="dataframe_info", args={"name": "sales"}),
        ToolCall(tool="dataframe_describe", args={"name": "sales"}),
        ToolCall(tool="memory_usage"),
        ToolCall(tool="get_source", args={"name": "total"}),
        ToolCall(tool="recent_executions", args={"n": 3}),
    ]
    typed: dict[str, tuple[dict[str, Any], str]] = {}
    for call in calls:
        obs, reward, terminated, _, info = env.step(encode_action(call))
        assert info["tool_result"]["ok"], (call, info["tool_result"])
        assert reward == pytest.approx(-env.episode.config.tool_cost) and not terminated
        assert 0 < len(obs["tool_result"]) <= env.episode.config.max_text_chars
        data = json.loads(json.dumps(info["tool_result"]["data"]))  # the typed answer, as JSON
        assert TOOLS[call.tool].answer.model_validate(data).model_dump(mode="json") == data, call
        typed[call.tool] = (data, obs["tool_result"])
    assert "sales" in {row["name"] for row in typed["list_variables"][0]["variables"]}
    head, head_text = typed["dataframe_head"]
    assert head["n"] == 3 and head_text == f"sales.head(3):\n{head['text']}", "the text is the typed answer's"
    assert "region" in env.step(ToolCall(tool="dataframe_head", args={"name": "sales"}))[0]["tool_result"]
    assert kernel.introspect.namespace_state() == before
    env.close()


def test_malformed_actions_are_answered_not_raised(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, tool_budget=3)
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, _, info = env.step({"kind": 0, "tool": 0, "args": "{not json", "text": ""})
    assert "not valid JSON" in obs["tool_result"] and not terminated and "action_error" in info
    obs, *_ = env.step("predict this")
    assert "Invalid action" in obs["tool_result"]
    obs, *_ = env.step(ToolCall(tool="inspect_variable", args={"name": "no_such_thing"}))
    assert "no_such_thing" in obs["tool_result"]
    assert obs["tools_left"] == 0
    obs, reward, _, _, info = env.step(ToolCall(tool="list_variables"))
    assert info["tool_refused"] and "scores" not in info and reward == 0.0, "past the budget a call is refused"
    assert "budget" in obs["tool_result"]
    env.close()


def test_static_mode_refuses_tools_and_full_mode_dumps_the_runtime(env_dataset: dict[str, str]) -> None:
    static = make(env_dataset, observation="static")
    static.reset(options={"sample": 3})
    obs, *_, info = static.step(ToolCall(tool="list_variables"))
    assert "tools are off" in obs["tool_result"]
    static.close()
    full = make(env_dataset, observation="full")
    obs, _ = full.reset(options={"sample": 3})
    assert "sales: pandas.DataFrame" in obs["runtime"] and "Kernel memory" in obs["runtime"]
    full.close()


@pytest.mark.slow
def test_a_dead_kernel_is_recovered_and_never_scored(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset)
    env.reset(options={"sample": 3})
    kernel = env.episode.tool_context().kernel
    os.kill(kernel.launcher.pid(), signal.SIGKILL)
    obs, reward, terminated, _, info = env.step(ToolCall(tool="list_variables"))
    assert "infrastructure_error" in info and "recovered" in info["infrastructure_error"]
    assert "scores" not in info and obs["tools_left"] == env.episode.config.tool_budget
    obs, *_ = env.step(ToolCall(tool="inspect_variable", args={"name": "sales"}))
    assert "DataFrame" in obs["tool_result"], "the state is back after recovery"
    env.close()


@pytest.mark.slow
def test_execution_score_runs_the_prediction_and_rolls_back(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, "themisto/NextCell-v0", execution_score=True)
    env.reset(options={"sample": 5})
    target = env.episode.current_sample.target
    kernel = env.episode.tool_context().kernel
    before = set(kernel.introspect.namespace_state().names)
    _, _, _, _, right = env.step(Prediction(text=target))
    assert right["execution_score"] == pytest.approx(1.0)
    _, _, _, _, wrong = env.step(Prediction(text="oops = 1 / 0"))
    assert wrong["execution_score"] < 0.5
    assert "oops" not in kernel.introspect.namespace_state().names, "the prediction was rolled back"
    assert before <= set(kernel.introspect.namespace_state().names)
    env.close()


def test_bad_options_name_the_problem(env_dataset: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="observation"):
        make(env_dataset, observation="everything")
    env = make(env_dataset)
    with pytest.raises(ConfigError, match="out of range"):
        env.reset(options={"sample": 999})
    env.close()


@pytest.mark.parametrize("vector", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_vector_envs(env_dataset: dict[str, str], vector: str) -> None:
    cls = gym.vector.SyncVectorEnv if vector == "sync" else gym.vector.AsyncVectorEnv
    envs = cls([lambda: gym.make(ENV_IDS[1], **env_dataset) for _ in range(2)])
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert len(obs["history"]) == 2
        actions = {"kind": [1, 1], "tool": [0, 0], "args": ["", ""], "text": ["", ""]}
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        assert rewards.shape == (2,) and all(0.0 <= r <= 1.0 for r in rewards)
    finally:
        envs.close()
