"""``themisto mcp``: the env's tools over the Model Context Protocol (`themisto_env.bridges.mcp`).

Over stdio (the default: an MCP client starts the command) or streamable HTTP (``--http HOST:PORT``); each MCP
session is one episode with its own kernel. ``--attach CONNECTION_FILE`` serves the read-only state tools
on a running Jupyter kernel instead (no episode). Nothing but the protocol is written to stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from themisto_env.commands.common import KERNEL_PANEL, KernelOptions, ToolBudget, ToolCost, episode_options
from themisto_env.errors import ConfigError

__all__ = ["mcp_command", "parse_address"]

_stderr = Console(stderr=True, soft_wrap=True)


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8000`` for IPv6) as a host and a port.

    Raises:
        ConfigError: Not of that shape.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http is HOST:PORT (e.g. 127.0.0.1:8765), got {address!r}")
    return host, int(port)


def mcp_command(
    http: Annotated[
        str | None,
        typer.Option("--http", metavar="HOST:PORT", help="Serve streamable HTTP at HOST:PORT/mcp (default: stdio)."),
    ] = None,
    attach: Annotated[
        Path | None,
        typer.Option(
            "--attach",
            metavar="CONNECTION_FILE",
            help="Serve the read-only state tools on this running Jupyter kernel (e.g. your notebook's: "
            "%connect_info names it): no episode, the kernel's namespace and history untouched.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="THEMISTO_SERVE_TOKEN",
            help="With --http: require 'Authorization: Bearer TOKEN' (anything but loopback needs one; prefer "
            "the variable: an option shows in the process list).",
        ),
    ] = None,
    idle_timeout: Annotated[
        float,
        typer.Option("--idle-timeout", metavar="SECONDS", help="With --http: close a session idle this long (0: no)."),
    ] = 600.0,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Threads running the sessions' calls, shared.")] = 64,
    task: Annotated[str, typer.Option(help="Task: next-cell or output.")] = "next-cell",
    observation: Annotated[str, typer.Option(help="Observation mode: static, full or tools.")] = "tools",
    backend: Annotated[
        str,
        typer.Option("--backend", "-b", rich_help_panel=KERNEL_PANEL, help="Kernel backend: local, bwrap or docker."),
    ] = "local",
    kernel: KernelOptions = None,
    data: Annotated[
        Path | None, typer.Option("--data", "--dataset", help="Dataset folder (default: the bundled data).")
    ] = None,
    split: Annotated[
        str | None,
        typer.Option("--split", metavar="train|test|NAME:SIDE", help="Serve only one side of the dataset's split."),
    ] = None,
    tool_budget: ToolBudget = None,
    tool_cost: ToolCost = None,
    execution_score: Annotated[
        bool, typer.Option("--execution-score", help="Also score next-cell predictions by running them.")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's log level (with --http).")] = "warning",
) -> None:
    """Serve the env's tools over MCP: each MCP session is one episode with its own kernel (or, with --attach,
    the read-only state tools on your own running kernel)."""
    import anyio

    from themisto_env.bridges.mcp.transports import http_app, run_stdio

    if attach is not None:
        from themisto_env.bridges.mcp.attach import attached_server

        server, sessions = attached_server(attach, http=http is not None)
        what = f"the read-only state tools on the kernel of {attach}"
    else:
        from themisto_env.bridges.mcp.app import episode_server

        options = episode_options(
            task,
            observation,
            backend,
            data=data,
            split=split,
            tool_budget=tool_budget,
            tool_cost=tool_cost,
            kernel=kernel,
            execution_score=execution_score,
        )
        server, sessions = episode_server(options, workers=workers, http=http is not None)
        what = f"the {task} task's episodes ({observation} observation, {backend} backend)"
    if http is None:
        _stderr.print(f"themisto mcp: {what} over stdio", markup=False)
        anyio.run(run_stdio, server, sessions)
        return
    host, port = parse_address(http)
    from themisto_env.bridges.gate import check_bind

    check_bind(host, token, flag="--http")
    _stderr.print(
        f"themisto mcp: {what} at http://{host}:{port}/mcp ({'token required' if token else 'no token'})", markup=False
    )
    import uvicorn

    app = http_app(server, sessions, token=token, idle_timeout_s=idle_timeout or None, host=host)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
