"""What the MCP tests share: the same actions in process and over MCP, a server's kernels, and clients."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psutil
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from themisto_env.env.actions import Prediction
from themisto_env.env.episode import Episode
from themisto_env.env.tools import ToolCall

#: The same actions in process and over MCP: (tool name, arguments); ``submit`` is a prediction.
ACTIONS: list[tuple[str, dict[str, Any]]] = [
    ("list_variables", {}),
    ("no_such_tool", {}),
    ("submit", {"prediction": "df = pd.read_csv('wine.csv')"}),
    ("recent_executions", {"n": 2}),
    ("submit", {"prediction": ""}),
    ("submit", {"prediction": "print(df.shape)"}),
]


def in_process_rewards(options: dict[str, Any], sample_id: str, actions: Sequence[tuple[str, dict[str, Any]]]) -> list:
    """The in-process episode's step rewards and answers for ``actions`` from ``sample_id``."""
    with Episode.open(**options) as episode:
        tid, index = episode.dataset.episode_position(sample_id, episode.config.sample_rule)
        episode.reset({"trajectory": tid, "sample": index})
        got = []
        for name, args in actions:
            action = Prediction(text=args["prediction"]) if name == "submit" else ToolCall(tool=name, args=args)
            obs, reward, _, _, info = episode.step(action)
            got.append((reward, info.get("tool_result", {}).get("text") if name != "submit" else info["scores"]))
        return got


async def mcp_rewards(client: Client, sample_id: str, actions: Sequence[tuple[str, dict[str, Any]]]) -> list:
    """The same over an MCP session: each call's reward and answer (structured content)."""
    started = await client.call_tool("start_sample", {"sample_id": sample_id})
    assert not started.is_error and started.structured_content["sample_id"] == sample_id
    got = []
    for name, args in actions:
        result = await client.call_tool(name, args)
        data = result.structured_content
        got.append((data["reward"], data["text"] if name != "submit" else data["scores"]))
    return got


def stdio_parameters(*args: str) -> StdioServerParameters:
    """``themisto mcp`` over stdio, in a process of its own."""
    return StdioServerParameters(command=sys.executable, args=["-m", "themisto_env.cli", "mcp", *args])


@asynccontextmanager
async def stdio_session(*args: str) -> AsyncIterator[Client]:
    """An MCP client session over stdio with a new ``themisto mcp`` process."""
    async with Client(stdio_client(stdio_parameters(*args)), read_timeout_seconds=300) as client:
        yield client


def mcp_servers() -> list[psutil.Process]:
    """The ``themisto mcp`` processes this test process started."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "themisto_env.cli mcp" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found
