"""The LLM agents on real envs, driven by scripted chat models (langchain-core's fake models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from tests.agents.conftest import MakeEnv
from tests.agents.episodes import run_agent
from themisto_env.agents import make_agent
from themisto_env.agents.fake_chat import ScriptedChatModel
from themisto_env.agents.llm import StaticContextAgent
from themisto_env.agents.llm_tools import ToolUsingAgent
from themisto_env.agents.prompting import load_prompts
from themisto_env.agents.transcript import message_text
from themisto_env.env.actions import Prediction
from themisto_env.env.tools import TOOL_NAMES, ToolCall
from themisto_env.errors import ConfigError

FIRST_OUTPUT = "k-frames-kframes/output/2"  # df.shape, right after df was made


def _usage(tokens_in: int, tokens_out: int) -> dict[str, int]:
    return {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}


def _tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def _first_sample(env: Any, agent: Any) -> tuple[list[Any], dict[str, Any]]:
    """Play the first sample of the first episode; return the actions and the scoring step's info."""
    obs, info = env.reset(options={"trajectory": 0})
    agent.reset(info)
    actions = []
    while True:
        action = agent.act(obs, info)
        actions.append(action)
        obs, _, _, _, info = env.step(action)
        if isinstance(action, Prediction) or "scores" in info:
            return actions, info


def test_llm_static_sees_the_history_and_predicts_from_a_chatty_reply(make_env: MakeEnv) -> None:
    reply = AIMessage(
        "Sure! The cell shows the shape:\n```\n(40, 3)\n```\nThat is 40 rows.", usage_metadata=_usage(90, 15)
    )
    model = ScriptedChatModel([reply])
    agent = make_agent("llm-static", chat_model=model)
    actions, info = _first_sample(make_env("output", "static"), agent)
    assert actions == [Prediction(text="(40, 3)")]
    assert info["scores"]["exact_match"] == 1.0
    assert (agent.usage.model_calls, agent.usage.input_tokens, agent.usage.output_tokens) == (1, 90, 15)
    system, user = model.prompts[0]
    assert isinstance(system, SystemMessage) and "displays when it runs" in message_text(system)
    assert isinstance(user, HumanMessage)
    assert "df = pd.DataFrame(" in user.content and "```python\ndf.shape\n```" in user.content
    assert "kernel's state" not in user.content and "tool" not in user.content


def test_llm_full_also_sees_the_runtime_dump(make_env: MakeEnv) -> None:
    model = ScriptedChatModel(["```\n(40, 3)\n```"])
    agent = make_agent("llm-full", chat_model=model)
    _first_sample(make_env("output", "full"), agent)
    user = model.prompts[0][1].content
    assert "The kernel's state now" in user and "df: " in user and "Kernel memory" in user
    assert not agent.usage.tokens_reported  # this reply carried no usage_metadata


def test_llm_tools_steps_the_env_for_every_model_tool_call(make_env: MakeEnv) -> None:
    model = ScriptedChatModel(
        [
            AIMessage(
                "",
                tool_calls=[_tool_call("list_variables", {}, "a"), _tool_call("inspect_variable", {"name": "df"}, "b")],
                usage_metadata=_usage(200, 30),
            ),
            AIMessage("The output will be:\n```\n(40, 3)\n```", usage_metadata=_usage(600, 10)),
        ]
    )
    agent = make_agent("llm-tools", chat_model=model)
    actions, info = _first_sample(make_env("output", "tools"), agent)
    assert actions == [
        ToolCall(tool="list_variables", args={}),
        ToolCall(tool="inspect_variable", args={"name": "df"}),
        Prediction(text="(40, 3)"),
    ]
    assert [c["tool"] for c in info["tool_calls"]] == ["list_variables", "inspect_variable"]
    assert info["scores"]["exact_match"] == 1.0
    assert agent.usage.as_dict() == {
        "model_calls": 2,
        "input_tokens": 800,
        "output_tokens": 40,
        "tokens_reported": True,
        "tool_calls": 2,
        "cached_calls": 0,
        "cached_input_tokens": 0,
        "cached_output_tokens": 0,
        "retries": 0,
        "rate_limited": 0,
    }
    assert model.bound_tools == [name for name in TOOL_NAMES if name != "try_cell"]  # it would reveal the output
    second = model.prompts[1]
    tool_messages = [m for m in second if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tool_messages] == ["a", "b"]
    contents = [message_text(m) for m in tool_messages]
    assert "df" in contents[0] and "pandas.DataFrame" in contents[0]
    assert contents[1].startswith("df: pandas.DataFrame\nshape (40, 3)")
    assert "tool calls for this prediction" in second[1].content


def test_llm_tools_reads_tool_errors_from_the_env(make_env: MakeEnv) -> None:
    model = ScriptedChatModel(
        [
            AIMessage("", tool_calls=[_tool_call("inspect_variable", {"name": "dff"}, "a")]),
            AIMessage("", tool_calls=[_tool_call("peek", {}, "b")]),
            AIMessage("```\n(40, 3)\n```"),
        ]
    )
    agent = make_agent("llm-tools", chat_model=model)
    _first_sample(make_env("output", "tools"), agent)
    errors = [message_text(m) for m in model.prompts[2] if isinstance(m, ToolMessage)]
    assert errors[0].startswith("Error: no variable named 'dff'") and "df" in errors[0]
    assert errors[1].startswith("Error: unknown tool 'peek'")


def test_llm_tools_answers_unreadable_tool_calls_without_an_env_step(make_env: MakeEnv) -> None:
    broken = AIMessage(
        "",
        invalid_tool_calls=[
            {
                "name": "inspect_variable",
                "args": '{"name": df',
                "id": "z",
                "error": "bad JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    model = ScriptedChatModel([broken, AIMessage("```\n(40, 3)\n```")])
    actions, info = _first_sample(make_env("output", "tools"), make_agent("llm-tools", chat_model=model))
    assert actions == [Prediction(text="(40, 3)")] and info["tool_calls"] == []
    (error,) = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert error.tool_call_id == "z" and error.status == "error" and "bad JSON" in error.content


def test_llm_tools_stops_calling_tools_when_the_budget_is_spent(make_env: MakeEnv) -> None:
    greedy = AIMessage(
        "",
        tool_calls=[
            _tool_call("list_variables", {}, "a"),
            _tool_call("inspect_variable", {"name": "df"}, "b"),
            _tool_call("memory_usage", {}, "c"),
        ],
    )
    model = ScriptedChatModel([greedy, AIMessage("```\n(40, 3)\n```")])
    agent = make_agent("llm-tools", chat_model=model)
    actions, info = _first_sample(make_env("output", "tools", tool_budget=2), agent)
    assert [type(a).__name__ for a in actions] == ["ToolCall", "ToolCall", "Prediction"]
    assert "forced_submission" not in info and info["scores"]["exact_match"] == 1.0
    last = model.prompts[1]
    assert [m.content for m in last if isinstance(m, ToolMessage)][2] == load_prompts().tool_not_run
    assert isinstance(last[-1], HumanMessage) and last[-1].content == load_prompts().budget_spent


def test_llm_tools_gives_up_after_max_model_calls(make_env: MakeEnv) -> None:
    again = AIMessage("let me look", tool_calls=[_tool_call("list_variables", {}, "x")])
    model = ScriptedChatModel([again], cycle=True)
    agent = ToolUsingAgent(model, max_model_calls=3)
    actions, info = _first_sample(make_env("output", "tools"), agent)
    assert agent.usage.model_calls == 3 and len(actions) == 4
    assert actions[-1] == Prediction(text="let me look")
    assert "scores" in info


def test_llm_tools_without_tools_answers_like_llm_static(make_env: MakeEnv) -> None:
    model = ScriptedChatModel(["```\n(40, 3)\n```"])
    with pytest.warns(UserWarning, match="observation='tools'"):
        actions, _ = _first_sample(make_env("output", "static"), make_agent("llm-tools", chat_model=model))
    assert actions == [Prediction(text="(40, 3)")]
    assert model.bound_tools == [] and "tool" not in model.prompts[0][1].content


def test_llm_agents_play_whole_episodes_async_on_next_cell(make_env: MakeEnv) -> None:
    env = make_env("next-cell", "tools")
    replies = [
        AIMessage("", tool_calls=[_tool_call("recent_executions", {"n": 2}, "r")], usage_metadata=_usage(50, 5)),
        AIMessage("Here is the next cell:\n```python\ndf.head()\n```", usage_metadata=_usage(80, 8)),
    ]
    agent = make_agent("llm-tools", chat_model=ScriptedChatModel(replies, cycle=True))
    results = run_agent(env, agent, use_async=True)
    assert len(results) == len(env.unwrapped.episode.samples)  # type: ignore[attr-defined]
    assert all(r.prediction == "df.head()" and len(r.tool_calls) == 1 for r in results)
    assert all(r.usage.model_calls == 2 and r.usage.input_tokens == 130 for r in results)
    assert any(r.scores["exact_match"] == 1.0 for r in results)


def test_llm_agents_are_made_from_a_provider_by_name() -> None:
    agent = make_agent("llm-static", provider="fake", responses=["```python\nx\n```"])
    assert isinstance(agent, StaticContextAgent) and isinstance(agent.chat_model, ScriptedChatModel)
    with pytest.raises(ConfigError, match="needs a model: --model PROVIDER/NAME on the command line"):
        make_agent("llm-full")
    with pytest.raises(ConfigError, match="not both"):
        make_agent("llm-tools", chat_model=ScriptedChatModel(), provider="fake")


def test_custom_prompt_templates_are_data(tmp_path: Path) -> None:
    from importlib import resources

    text = resources.files("themisto_env.agents").joinpath("prompts/default.yaml").read_text("utf-8")
    custom = tmp_path / "prompts.yaml"
    custom.write_text(text.replace("Predict the source of the next executed cell.", "GUESS THE NEXT CELL."))
    model = ScriptedChatModel(["x"])
    agent = StaticContextAgent(model, prompts=custom)
    agent.reset({"sample_id": "s", "task": "next-cell"})
    agent.act({"history": "", "cell": "", "runtime": "", "tool_result": "", "tools_left": 0}, {"task": "next-cell"})
    user = model.prompts[0][1].content
    assert "GUESS THE NEXT CELL." in user and "No cell has been executed yet" in user
    broken = tmp_path / "broken.yaml"
    broken.write_text("system: {}\n")
    with pytest.raises(ConfigError, match="incomplete or malformed"):
        load_prompts(broken)
    typo = tmp_path / "typo.yaml"
    typo.write_text(text.replace("{history}", "{histroy}"))
    with pytest.raises(ConfigError, match=r"sections\.history has a bad placeholder \(KeyError\('histroy'\)\)"):
        load_prompts(typo)
    with pytest.raises(ConfigError, match="cannot read prompt templates"):
        load_prompts(tmp_path / "missing.yaml")


def test_message_text_joins_the_text_parts_of_a_list_content() -> None:
    message = AIMessage([{"type": "text", "text": "```\n4"}, {"type": "tool_use", "id": "x"}, "2\n```"])
    assert message_text(message) == "```\n42\n```"


def test_each_draw_of_pass_at_k_starts_a_fresh_conversation(make_env: MakeEnv) -> None:
    """With K predictions per sample, llm-tools starts each draw from the sample's own prompt: it never
    sees its previous answer, and its model-call limit and usage are per draw (summed in the row)."""
    from themisto_env.run.config import RunConfig
    from themisto_env.run.rollout import episode_rows

    replies = [
        AIMessage("", tool_calls=[_tool_call("list_variables", {}, "a")], usage_metadata=_usage(100, 5)),
        AIMessage("The output will be:\n```\n(40, 3)\n```", usage_metadata=_usage(300, 10)),
        AIMessage("The output will be:\n```\n(1, 1)\n```", usage_metadata=_usage(100, 7)),
    ]
    model = ScriptedChatModel(replies)
    agent = make_agent("llm-tools", chat_model=model)
    env = make_env("output", "tools", attempts=2)
    config = RunConfig(agent="llm-tools", task="output", attempts=2)
    inner = env.unwrapped
    tid = inner.episode.episode_ids[0]
    rows = episode_rows(
        config, inner, agent, {"observation": "tools"}, tid, 0, {inner.episode.episode_samples[tid][0].id}
    )
    row = next(rows)
    assert row.draws is not None and [d.prediction for d in row.draws] == ["(40, 3)", "(1, 1)"]
    assert len(model.prompts) == 3
    opening = [m for m in model.prompts[0] if not isinstance(m, AIMessage | ToolMessage)]
    assert model.prompts[2] == opening, "the second draw saw the first draw's conversation"
    assert row.usage is not None and row.usage["model_calls"] == 3 and row.usage["input_tokens"] == 500
    assert [d.tool_calls for d in row.draws][1] == []
