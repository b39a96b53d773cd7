"""The agent protocol, the bookkeeping base class, usage, and the registry by name."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from themisto_env.agents import Agent, AgentUsage, BaseAgent, make_agent, parse_history, register_agent
from themisto_env.agents.registry import AGENTS
from themisto_env.env.actions import Prediction
from themisto_env.env.tools import ToolCall
from themisto_env.errors import ConfigError


class LastSourceAgent(BaseAgent):
    """The example of the module docstring: predicts that the developer re-runs the last cell."""

    name = "last-source"

    def decide(self, observation, info):  # type: ignore[no-untyped-def]
        cells = parse_history(observation["history"])
        return Prediction(text=cells[-1].source if cells else "")


class LooksThenPredicts(BaseAgent):
    name = "looks-then-predicts"

    def decide(self, observation: Any, info: Any) -> ToolCall | Prediction:
        if observation["tool_result"]:
            return Prediction(text=observation["tool_result"])
        return ToolCall(tool="list_variables")


def _obs(history: str = "", tool_result: str = "") -> dict[str, Any]:
    return {"history": history, "cell": "", "runtime": "", "tool_result": tool_result, "tools_left": 5}


def _info(sample_id: str = "t/output/1", **extra: Any) -> dict[str, Any]:
    return {"sample_id": sample_id, "task": "output", "observation_mode": "tools", "tool_names": ("x",), **extra}


def test_a_dozen_line_agent_satisfies_the_protocol() -> None:
    agent = LastSourceAgent()
    assert isinstance(agent, Agent)
    agent.reset(_info())
    action = agent.act(_obs("# In [1]:\nx = 1\n\n# In [2]:\nx + 1\n# Out [2]:\n2\n"), _info())
    assert action == Prediction(text="x + 1")


def test_usage_counts_tool_calls_per_sample_and_restarts_on_a_new_sample() -> None:
    agent = LooksThenPredicts()
    agent.reset(_info())
    assert isinstance(agent.act(_obs(), _info("a")), ToolCall)
    assert agent.act(_obs(tool_result="x"), _info("a")) == Prediction(text="x")
    assert agent.usage.tool_calls == 1  # the runner reads the sample's usage after the prediction
    agent.act(_obs(), _info("b"))
    assert agent.usage == AgentUsage(tool_calls=1)
    agent.reset(_info())
    assert agent.usage == AgentUsage()


def test_aact_runs_decide_by_default() -> None:
    agent = LooksThenPredicts()
    agent.reset(_info())
    assert isinstance(asyncio.run(agent.aact(_obs(), _info())), ToolCall)
    assert agent.usage.tool_calls == 1


def test_usage_adds_model_calls_and_knows_when_tokens_were_not_reported() -> None:
    usage = AgentUsage()
    usage.add_model_call(100, 20)
    assert usage.tokens_reported and (usage.input_tokens, usage.output_tokens, usage.model_calls) == (100, 20, 1)
    usage.add_model_call(None, None)
    assert not usage.tokens_reported and usage.model_calls == 2 and usage.input_tokens == 100
    total = usage + AgentUsage(model_calls=1, input_tokens=5, output_tokens=1, tool_calls=3)
    assert total.as_dict() == {
        "model_calls": 3,
        "input_tokens": 105,
        "output_tokens": 21,
        "tokens_reported": False,
        "tool_calls": 3,
        "cached_calls": 0,
        "cached_input_tokens": 0,
        "cached_output_tokens": 0,
        "retries": 0,
        "rate_limited": 0,
    }


def test_an_agent_warns_when_the_env_is_in_another_observation_mode() -> None:
    agent = make_agent("runtime-rules")
    with pytest.warns(UserWarning, match="observation='tools'"):
        agent.reset(_info(observation_mode="static"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.reset(_info(observation_mode="tools"))
        make_agent("retrieval").reset(_info(observation_mode="full"))  # works in any mode


@pytest.mark.parametrize("name", ["repeat-previous", "retrieval", "runtime-rules"])
def test_make_agent_makes_the_offline_agents_by_name(name: str) -> None:
    agent = make_agent(name)
    assert isinstance(agent, Agent)
    assert agent.name == name


def test_the_registry_lists_every_agent_of_the_design() -> None:
    assert set(AGENTS) >= {"repeat-previous", "retrieval", "runtime-rules", "llm-static", "llm-full", "llm-tools"}


def test_an_unknown_name_suggests_the_nearest() -> None:
    with pytest.raises(ConfigError, match=r"no agent named 'retreival'; did you mean 'retrieval'\?"):
        make_agent("retreival")
    with pytest.raises(ConfigError, match="agents: llm-full, llm-static"):
        make_agent("zzz")


def test_register_agent_makes_a_new_agent_available_by_name() -> None:
    register_agent("last-source-test", f"{__name__}:LastSourceAgent")
    try:
        agent = make_agent("last-source-test")
        assert isinstance(agent, LastSourceAgent) and agent.name == "last-source-test"
        with pytest.raises(ConfigError, match="already registered"):
            register_agent("last-source-test", f"{__name__}:LooksThenPredicts")
    finally:
        del AGENTS["last-source-test"]


def test_bad_targets_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"'package\.module:factory'"):
        register_agent("x", "no_colon_here")
    register_agent("broken-test", "themisto_env.agents.nowhere:Agent")
    try:
        with pytest.raises(ConfigError, match=r"cannot import themisto_env\.agents\.nowhere:Agent"):
            make_agent("broken-test")
    finally:
        del AGENTS["broken-test"]


def test_importing_the_agents_package_imports_no_provider_and_no_langchain() -> None:
    import subprocess
    import sys

    code = (
        "import sys, themisto_env.agents as a; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('langchain_core', 'langchain_openai', 'langchain_anthropic', 'langchain_ollama')]; "
        "print(bad); assert not bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
