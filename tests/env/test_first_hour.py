"""The env as a new researcher meets it (issue 22): an over-budget tool call is refused with the sample
still open, reset takes a sample id, the action space prints short, and an agent returning the wrong type
stops a run with one line naming the type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from themisto_env.agents import BaseAgent
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.errors import ConfigError


def make(env_dataset: dict[str, str], **options: Any) -> ThemistoEnv:
    options = {"task": "next-cell", "observation": "tools", **options}
    return ThemistoEnv(dataset=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"], **options)


def test_a_tool_call_past_the_budget_is_refused_and_the_sample_stays_open(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, tool_budget=1, tool_cost=0.05)
    try:
        obs, info = env.reset(options={"sample": 2})
        sample = info["sample_id"]
        obs, reward, *_ = env.step(ToolCall(tool="list_variables"))
        assert reward == pytest.approx(-0.05) and obs["tools_left"] == 0
        obs, reward, terminated, _, info = env.step(ToolCall(tool="list_variables"))
        assert reward == 0.0 and not terminated, "a refusal costs nothing and ends nothing"
        assert "budget" in obs["tool_result"] and "Prediction" in obs["tool_result"]
        assert info["sample_id"] == sample and "scores" not in info and info.get("tool_refused")
        target = env.episode.current_sample.target  # type: ignore[union-attr]
        _, reward, _, _, info = env.step(Prediction(text=target))
        assert info["scored_sample_id"] == sample and info["scores"]["exact_match"] == 1.0
        assert info["reward"] == pytest.approx(1.0 - 0.05), "one paid call; the refused one cost nothing"
        assert reward == pytest.approx(1.0)  # the sample's reward less what its tool steps paid
    finally:
        env.close()


def test_reset_takes_a_sample_id_or_an_index(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, observation="static")
    try:
        wanted = env.episode.samples[3]
        _, info = env.reset(options={"sample": wanted.id})
        assert info["sample_id"] == wanted.id
        tid = wanted.trajectory_id
        _, info = env.reset(options={"trajectory": tid, "sample": 2})
        assert info["sample_id"] == env.episode.episode_samples[tid][2].id  # an index into the trajectory's samples
        near = wanted.id.rsplit("/", 1)[0] + "/9999"
        with pytest.raises(ConfigError, match=r"no sample .*9999.*did you mean"):
            env.reset(options={"sample": near})
        with pytest.raises(ConfigError, match=r"output sample.*this env's task is next-cell"):
            env.reset(options={"sample": wanted.id.replace("/next-cell/", "/output/")})
        other = next(t for t in env.episode.episode_ids if t != tid) if len(env.episode.episode_ids) > 1 else None
        if other is not None:
            with pytest.raises(ConfigError, match="not of trajectory"):
                env.reset(options={"trajectory": other, "sample": wanted.id})
    finally:
        env.close()


def test_the_action_space_prints_short(env_dataset: dict[str, str]) -> None:
    env = make(env_dataset, observation="static")
    try:
        for space in (env.action_space, env.observation_space):
            assert len(str(space)) < 600, str(space)[:300]
            assert "BMP" in repr(space)
    finally:
        env.close()


class StringAgent(BaseAgent):
    """Returns the cell as a string instead of a Prediction: a bug the run must name."""

    name = "string-agent"

    def decide(self, observation: Any, info: Any) -> Any:
        return "df.head()"


def test_an_agent_returning_a_string_stops_the_run_naming_the_type(env_dataset: dict[str, str], tmp_path: Path) -> None:
    from themisto_env.run.config import RunConfig
    from themisto_env.run.runner import run

    config = RunConfig(
        agent=f"{__name__}:StringAgent",
        data=env_dataset["dataset"],
        limit=2,
        env={"snapshot_dir": env_dataset["snapshot_dir"]},
    )
    with pytest.raises(ConfigError, match=r"returned a str \('df.head\(\)'\), not an action: return Prediction"):
        run(config, tmp_path, progress=False)


def test_reset_options_read_a_sample_id() -> None:
    from themisto_env.data.samples import Sample
    from themisto_env.env.actions import reset_options

    episodes = {t: [Sample(f"{t}/next-cell/{k}", "next-cell", t, k, "x") for k in (1, 3, 4)] for t in ("a", "b")}
    ids = list(episodes)
    assert reset_options({"sample": "b/next-cell/3"}, ids, episodes, "next-cell") == ("b", 1)
    assert reset_options({"trajectory": "b", "sample": "b/next-cell/4"}, ids, episodes, "next-cell") == ("b", 2)
    assert reset_options({"trajectory": "a", "sample": 2}, ids, episodes, "next-cell") == ("a", 2)
    with pytest.raises(ConfigError, match=r"'sample' is an index .* no sample 'b/next-cell/2'.*did you mean"):
        reset_options({"sample": "b/next-cell/2"}, ids, episodes, "next-cell")
    with pytest.raises(ConfigError, match="an output sample; this env's task is next-cell"):
        reset_options({"sample": "b/output/3"}, ids, episodes, "next-cell")
    with pytest.raises(ConfigError, match="not of trajectory 'a'"):
        reset_options({"trajectory": "a", "sample": "b/next-cell/3"}, ids, episodes, "next-cell")


def test_an_unknown_sample_id_is_named_with_what_exists() -> None:
    env = ThemistoEnv(observation="static")
    try:
        with pytest.raises(ConfigError) as raised:
            env.reset(options={"sample": "no/such/sample"})
        message = str(raised.value)
        assert "\n" not in message and "is an such sample" not in message, message
        assert "no sample 'no/such/sample'" in message, "it names the id asked for"
        assert env.episode.samples[0].id.rsplit("/", 2)[0] in message or "e.g." in message, "it shows what exists"
        assert "TRAJECTORY/TASK/STEP" in message
    finally:
        env.close()


def test_an_agent_returning_the_wrong_type_is_named() -> None:
    from themisto_env.agents.base import checked_action

    agent = StringAgent()
    with pytest.raises(ConfigError, match=r"agent 'string-agent' returned a str \('df.head\(\)'\), not an action"):
        checked_action(agent.decide({}, {}), agent)
    with pytest.raises(ConfigError, match="returned a NoneType"):
        checked_action(None, agent)
    assert checked_action(Prediction(text="x"), agent) == Prediction(text="x")
    assert checked_action({"kind": 1, "text": "x"}, agent) == {"kind": 1, "text": "x"}


class ToolsForeverAgent(BaseAgent):
    """Never predicts: calls a tool at every turn, budget or not."""

    name = "tools-forever"
    observation = "tools"

    def decide(self, observation: Any, info: Any) -> Any:
        return ToolCall(tool="list_variables")


def test_a_run_moves_on_from_an_agent_that_never_predicts(env_dataset: dict[str, str], tmp_path: Path) -> None:
    from themisto_env.run.config import RunConfig
    from themisto_env.run.results import read_results
    from themisto_env.run.rollout import REFUSALS_BEFORE_SUBMISSION
    from themisto_env.run.runner import run

    config = RunConfig(
        agent=f"{__name__}:ToolsForeverAgent",
        data=env_dataset["dataset"],
        limit=2,
        selection="first",
        env={"snapshot_dir": env_dataset["snapshot_dir"], "tool_budget": 1},
    )
    summary = run(config, tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert summary["samples"] == 2 and all(r.forced_submission and r.prediction == "" for r in rows)
    assert all(len(r.tool_calls) == 1 for r in rows)  # one paid call; the refused ones are not tool calls
    assert REFUSALS_BEFORE_SUBMISSION == 3
