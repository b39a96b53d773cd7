"""How the MCP server is reached: stdio (`run_stdio`) or streamable HTTP (`McpEndpoint`, an ASGI app; on its
own `http_app`, or mounted at ``/mcp`` beside the OpenEnv routes of ``themisto serve`` by `mount_mcp`).

Over HTTP each MCP session (``Mcp-Session-Id``) has its own episode; it is closed, with its kernels, on the
client's ``DELETE``, after ``idle_timeout_s`` without a call (a client that vanished sends nothing), and at
shutdown. Over stdio the one connection's episode is closed when the input ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

from themisto_env.bridges.gate import Gate
from themisto_env.bridges.mcp.server import SESSION_HEADER, Sessions

__all__ = ["MCP_PATH", "McpEndpoint", "http_app", "mount_mcp", "run_stdio"]

MCP_PATH = "/mcp"
"""Where the streamable-HTTP endpoint is."""

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def run_stdio(server: Server, sessions: Sessions) -> None:
    """Serve one connection over stdin/stdout until the input ends, then close its episode."""
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        with anyio.CancelScope(shield=True):
            await sessions.close_all()


class McpEndpoint:
    """The streamable-HTTP endpoint (ASGI): the SDK's session manager, and the sessions' episodes closed with
    their MCP sessions. `lifespan` must be running while it serves.

    Args:
        server: The MCP server.
        sessions: Its sessions.
        idle_timeout_s: Close a session idle this long (None: never).
        host: The address served: a loopback one turns on the SDK's DNS-rebinding protection.
    """

    def __init__(self, server: Server, sessions: Sessions, *, idle_timeout_s: float | None, host: str) -> None:
        security = None
        if host in _LOOPBACK:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "testserver"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        self.sessions = sessions
        self.idle_timeout_s = idle_timeout_s
        # no session_idle_timeout of the SDK's: it cancels a session's call in progress at its deadline (a
        # state served, a cell tried can take longer); the reaper here closes only sessions between calls
        self.manager = StreamableHTTPSessionManager(app=server, security_settings=security)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.manager.handle_request(scope, receive, send)
        if scope["type"] == "http" and scope.get("method") == "DELETE":  # the client ended its session
            key = dict(scope.get("headers") or ()).get(SESSION_HEADER.encode())
            if key:
                await self.sessions.close(key.decode("latin-1"))

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the session manager and the idle reaper; at the end close every session's episode."""
        async with self.manager.run(), anyio.create_task_group() as group:
            if self.idle_timeout_s:
                group.start_soon(self._reap, self.idle_timeout_s)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await self.sessions.close_all()

    async def _reap(self, idle_s: float) -> None:
        while True:
            await anyio.sleep(max(min(idle_s / 4, 5.0), 0.05))
            await self.sessions.close_idle(idle_s)


def http_app(
    server: Server,
    sessions: Sessions,
    *,
    token: str | None = None,
    idle_timeout_s: float | None = 600.0,
    host: str = "127.0.0.1",
) -> Any:
    """The MCP server alone over streamable HTTP at `MCP_PATH` (``themisto mcp --http``), behind the token's
    `themisto_env.bridges.gate.Gate`."""
    endpoint = McpEndpoint(server, sessions, idle_timeout_s=idle_timeout_s, host=host)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with endpoint.lifespan():
            yield

    app = Starlette(routes=[Route(MCP_PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"])], lifespan=lifespan)
    return Gate(app, token)


def mount_mcp(app: Any, endpoint: McpEndpoint) -> None:
    """Add ``endpoint`` at `MCP_PATH` to a Starlette/FastAPI ``app`` (its token gate, if any, is the app's),
    its lifespan around the app's own. An HTTP route the app had there goes (OpenEnv's ``POST /mcp`` serves
    only its own MCP environments; its WebSocket ``/mcp`` stays)."""
    routes = app.router.routes
    routes[:] = [
        route for route in routes if not (getattr(route, "path", None) == MCP_PATH and hasattr(route, "methods"))
    ]
    routes.insert(0, Route(MCP_PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with endpoint.lifespan(), inner(served) as state:
            yield state

    app.router.lifespan_context = lifespan
