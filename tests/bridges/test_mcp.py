"""``themisto mcp`` over stdio, spoken to by the ``mcp`` SDK's own client: the tools listed are the tool
table's, an episode earns the in-process env's rewards, a malformed call is a tool error and the session
goes on, and the end of the session frees its kernels."""

from __future__ import annotations

import anyio
import psutil
import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'themisto-env[mcp]'")

from tests.bridges.mcp_support import (
    ACTIONS,
    in_process_rewards,
    mcp_rewards,
    mcp_servers,
    stdio_session,
)
from tests.conftest import kernels_under
from themisto_env.env.tools import SUBMIT, TOOLS, task_tools
from themisto_env.replay.dataset import Dataset

SAMPLE = "wine-classification-f289726f/next-cell/1"


@pytest.fixture(scope="module", autouse=True)
def bundled_data() -> None:
    """The bundled data built (on first use, minutes) before any server starts."""
    Dataset.open()


@pytest.mark.parametrize("task", ["next-cell", "output"])
def test_the_listed_tools_are_the_tool_table(task: str) -> None:
    async def listed() -> list:
        async with stdio_session("--task", task) as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listed)}
    expected = [spec.name for spec in task_tools(task)]
    assert list(tools) == [*expected, "start_sample", SUBMIT.name]
    for name in expected:
        spec = TOOLS[name]
        assert tools[name].description == spec.description
        assert tools[name].input_schema == spec.args_model.model_json_schema()
        assert tools[name].annotations is not None and tools[name].annotations.read_only_hint is spec.read_only
    assert tools[SUBMIT.name].input_schema == SUBMIT.args_model.model_json_schema()
    assert tools["start_sample"].annotations.read_only_hint is False


def test_an_episode_over_stdio_earns_the_in_process_rewards() -> None:
    expected = in_process_rewards({}, SAMPLE, ACTIONS)

    async def over_mcp() -> list:
        async with stdio_session() as client:
            return await mcp_rewards(client, SAMPLE, ACTIONS)

    got = anyio.run(over_mcp)
    assert [reward for reward, _ in got] == [reward for reward, _ in expected]
    assert [answer for _, answer in got] == [answer for _, answer in expected]


def test_a_malformed_call_is_a_tool_error_and_the_session_goes_on() -> None:
    async def calls() -> None:
        async with stdio_session("--tool-budget", "2") as client:
            early = await client.call_tool("list_variables", {})
            assert early.is_error and "start_sample" in early.content[0].text
            started = await client.call_tool("start_sample", {"sample_id": SAMPLE})
            assert not started.is_error and "next cell" in started.content[0].text.lower()
            bad_args = await client.call_tool("inspect_variable", {"nme": "x"})
            assert bad_args.is_error and "'name' is required" in bad_args.content[0].text
            unknown = await client.call_tool("lst_variables", {})
            assert unknown.is_error and "Did you mean 'list_variables'?" in unknown.content[0].text
            bad_start = await client.call_tool("start_sample", {"sample_id": "nowhere/next-cell/3"})
            assert bad_start.is_error
            refused = await client.call_tool("list_variables", {})  # the budget of 2 is spent
            assert refused.is_error and refused.structured_content["refused"] is True
            submitted = await client.call_tool("submit", {"prediction": "print(1)"})
            assert not submitted.is_error and submitted.structured_content["scored_sample_id"] == SAMPLE
            prompt = await client.read_resource("themisto://sample/prompt")
            assert prompt.contents[0].text and prompt.contents[0].text in submitted.content[0].text  # the next's
            after = await client.call_tool("recent_executions", {"n": 1})
            assert not after.is_error and after.structured_content["ok"] is True

    anyio.run(calls)


def test_the_end_of_a_stdio_session_frees_its_kernels() -> None:
    async def session() -> tuple[psutil.Process, list[psutil.Process]]:
        async with stdio_session() as client:
            await client.call_tool("start_sample", {"sample_id": SAMPLE})
            answer = await client.call_tool("list_variables", {})
            assert not answer.is_error
            (server,) = mcp_servers()
            kernels = kernels_under(server.pid)
            assert kernels, "a tool call needs the sample's kernel"
            return server, kernels

    server, kernels = anyio.run(session)
    _gone, alive = psutil.wait_procs([server, *kernels], timeout=30)
    assert not alive, f"left running after the session ended: {[p.pid for p in alive]}"


def test_a_dead_kernel_is_a_protocol_error_marked_as_a_fault_and_the_session_goes_on() -> None:
    from mcp import MCPError

    async def calls() -> None:
        async with stdio_session() as client:
            await client.call_tool("start_sample", {"sample_id": SAMPLE})
            assert not (await client.call_tool("list_variables", {})).is_error
            (server,) = mcp_servers()
            for kernel in kernels_under(server.pid):  # the machinery fails under the session
                kernel.kill()
            with pytest.raises(MCPError, match="infrastructure fault"):
                await client.call_tool("inspect_variable", {"name": "_no_such_variable"})
            again = await client.call_tool("inspect_variable", {"name": "_no_such_variable"})
            assert again.is_error and "no variable named" in again.content[0].text  # the kernel answers again

    anyio.run(calls)
