"""The MCP server (the official ``mcp`` SDK's low-level ``Server``): one MCP session = one episode.

* tools (`themisto_env.bridges.mcp.tools`): the table's observation tools and the episode's own;
* the sample's prompt: the resource `PROMPT_URI` and the prompt `PROMPT_NAME` (also what a start returns);
* answers: the text the model reads, and beside it the structured content (the env's ``tool_result`` dict,
  its typed ``data`` included where the env gives one); a mistake of the model's is a tool error
  (``isError``), a machinery fault a protocol error (``MCPError``) whose message says it is one;
* sessions (`Sessions`): each MCP session (the ``Mcp-Session-Id`` of streamable HTTP; the one connection of
  stdio) has its own `EpisodeSession`, closed (its kernels freed) when the session ends: the client's
  ``DELETE``, an idle timeout, the end of stdio, the server's shutdown.

The session state lives on the server: over streamable HTTP the server speaks the handshake era of the
protocol (its ``server/discover`` advertises the handshake versions: the SDK's clients then ``initialize``
and get an ``Mcp-Session-Id``); over stdio the one connection is the session, in either era.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from themisto_env._version import __version__
from themisto_env.bridges.mcp.session import Answer, fault_message
from themisto_env.errors import InfrastructureError

__all__ = ["PROMPT_NAME", "PROMPT_URI", "SESSION_HEADER", "CallSession", "Sessions", "build_server"]

log = logging.getLogger("themisto_env")

PROMPT_URI = "themisto://sample/prompt"
"""The resource holding the current sample's prompt (empty before a start)."""

PROMPT_NAME = "sample"
"""The prompt of the current sample (one user message: the system text, then the observation)."""

SESSION_HEADER = "mcp-session-id"
"""Streamable HTTP's session header (its absence: the one connection of stdio)."""

FAULT = types.INTERNAL_ERROR
"""The JSON-RPC code of a machinery fault."""


class CallSession(Protocol):
    """What a session answers (an `EpisodeSession`, or attach mode's `AttachedSession`)."""

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> Answer: ...

    def prompt_text(self) -> str: ...

    def close(self) -> None: ...


@dataclass
class _Entry:
    session: CallSession
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    used: float = field(default_factory=time.monotonic)


class Sessions:
    """The open sessions by key, each made on first use by ``factory`` and closed when its session ends.

    Args:
        factory: Makes a session (cheap: an episode makes its kernel when a state is needed).
        workers: Threads the sessions' blocking calls run on, shared (calls past this many at once wait).
    """

    def __init__(self, factory: Callable[[], CallSession], *, workers: int = 64) -> None:
        self.factory = factory
        self.limiter = anyio.CapacityLimiter(workers)
        self._open: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._open)

    def entry(self, key: str) -> _Entry:
        entry = self._open.get(key)
        if entry is None:
            entry = self._open[key] = _Entry(self.factory())
        entry.used = time.monotonic()
        return entry

    async def run(self, key: str, work: Callable[[CallSession], Any]) -> Any:
        """Run ``work(session)`` on a worker thread, after the session's earlier calls."""
        entry = self.entry(key)
        async with entry.lock:
            try:
                return await anyio.to_thread.run_sync(work, entry.session, limiter=self.limiter)
            finally:
                entry.used = time.monotonic()

    async def close(self, key: str) -> None:
        """Close one session (its episode and kernels), if open."""
        entry = self._open.pop(key, None)
        if entry is not None:
            async with entry.lock:
                await anyio.to_thread.run_sync(entry.session.close, limiter=self.limiter)

    async def close_idle(self, idle_s: float) -> None:
        """Close the sessions that made no call for ``idle_s`` seconds."""
        now = time.monotonic()
        for key in [key for key, entry in self._open.items() if now - entry.used > idle_s and not entry.lock.locked()]:
            log.info("closing the MCP session %s: idle for %.0f s", key[:12], idle_s)
            await self.close(key)

    async def close_all(self) -> None:
        """Close every session (the server is stopping)."""
        for key in list(self._open):
            await self.close(key)


def session_key(ctx: ServerRequestContext[Any, Any]) -> str:
    """The session a request belongs to: its ``Mcp-Session-Id`` over HTTP, the connection itself on stdio."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    given = headers.get(SESSION_HEADER) if headers is not None else None
    return str(given) if given else "stdio"


def build_server(
    sessions: Sessions, tools: Callable[[], list[types.Tool]], *, name: str = "themisto", handshake_only: bool = False
) -> Server:
    """The MCP server over ``sessions``, listing ``tools()``; ``handshake_only`` (streamable HTTP, where a
    session's state needs its ``Mcp-Session-Id``) declines the stateless era in ``server/discover``. Over
    stdio either era keeps the one connection's state."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        def work(session: CallSession) -> Answer:
            return session.call(params.name, params.arguments)

        answer = await _answered(sessions.run(session_key(ctx), work))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.text)],
            structured_content=answer.data,
            is_error=answer.error,
        )

    async def prompt_text(ctx: Any) -> str:
        return str(await _answered(sessions.run(session_key(ctx), lambda session: session.prompt_text())))

    async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        resource = types.Resource(
            name="sample_prompt",
            uri=PROMPT_URI,
            description="The current sample's prompt (empty before start_sample).",
            mime_type="text/plain",
        )
        return types.ListResourcesResult(resources=[resource])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if str(params.uri) != PROMPT_URI:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {params.uri}; there is {PROMPT_URI}")
        text = await prompt_text(ctx)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=PROMPT_URI, text=text, mime_type="text/plain")]
        )

    async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        prompt = types.Prompt(name=PROMPT_NAME, description="The current sample's prompt (after start_sample).")
        return types.ListPromptsResult(prompts=[prompt])

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != PROMPT_NAME:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no prompt {params.name!r}; there is {PROMPT_NAME!r}")
        text = await prompt_text(ctx)
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        return types.GetPromptResult(description="The current sample's prompt.", messages=[message])

    server: Server = Server(
        name,
        version=__version__,
        instructions=(
            "Predict what a developer does next in a Jupyter notebook. Call start_sample, query the live kernel "
            "state with the read-only tools, then call submit with your prediction."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    if handshake_only:
        server.add_request_handler("server/discover", types.RequestParams, _discover_handshake_only)
    return server


async def _discover_handshake_only(ctx: Any, params: types.RequestParams | None) -> types.DiscoverResult:
    """Advertise only the handshake era: a session's episode lives on the server, between requests."""
    return types.DiscoverResult(
        supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS), capabilities=types.ServerCapabilities()
    )


async def _answered(call: Awaitable[Any]) -> Any:
    """Await a session's call; a machinery fault becomes a protocol error saying it is one."""
    try:
        return await call
    except InfrastructureError as exc:
        log.warning("MCP call failed on the machinery: %s", exc)
        raise MCPError(code=FAULT, message=fault_message(exc), data={"fault": type(exc).__name__}) from exc
