"""inspect_ai's MCP tool source for the env: `inspect_tools` gives ``themisto mcp`` as an inspect
``MCPServer`` (``mcp_server_stdio``; ``mcp_server_http`` for a served ``/mcp``), to pass as a solver's or an
agent's tools: the model then starts samples, queries the live state and submits through MCP, one episode
per connection (examples/inspect_mcp.py). Needs ``pip install 'themisto-env[inspect,mcp]'``.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["inspect_tools"]


def inspect_tools(*options: str, url: str | None = None, token: str | None = None) -> Any:
    """``themisto mcp OPTIONS`` (the env's flags, e.g. ``"--task", "output"``) over stdio as inspect_ai's MCP
    server; with ``url`` (``http://HOST:PORT/mcp``), that served endpoint instead, with ``token``."""
    from inspect_ai.tool import mcp_server_http, mcp_server_stdio

    if url is not None:
        return mcp_server_http(name="themisto", url=url, authorization=token, sse_read_timeout=600)
    return mcp_server_stdio(name="themisto", command=sys.executable, args=["-m", "themisto_env.cli", "mcp", *options])
