"""``themisto serve``: the env as an OpenEnv server (`themisto_env.bridges.openenv.server`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from themisto_env.commands.common import (
    KERNEL_PANEL,
    KernelOptions,
    ToolBudget,
    ToolCost,
    console,
    episode_options,
)


def serve_command(
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but loopback needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="THEMISTO_SERVE_TOKEN",
            help="Require 'Authorization: Bearer TOKEN' on every request but /health (prefer the variable: "
            "an option shows in the process list).",
        ),
    ] = None,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", help="WebSocket sessions (episodes, kernels) at once.")
    ] = 32,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="Threads running the sessions' calls, shared (an idle session holds none; calls past this many "
            "at once wait). Default: --max-sessions, at most 64.",
        ),
    ] = None,
    idle_timeout: Annotated[
        float, typer.Option("--idle-timeout", metavar="SECONDS", help="Close a session idle this long (0: never).")
    ] = 600.0,
    task: Annotated[str, typer.Option(help="Default task: next-cell or output (a reset may ask for the other).")] = (
        "next-cell"
    ),
    observation: Annotated[
        str, typer.Option(help="Default observation mode: static, full or tools (a reset may ask for another).")
    ] = "tools",
    backend: Annotated[
        str,
        typer.Option("--backend", "-b", rich_help_panel=KERNEL_PANEL, help="Kernel backend: local, bwrap or docker."),
    ] = "local",
    kernel: KernelOptions = None,
    data: Annotated[Path | None, typer.Option(help="Dataset folder (default: the bundled data).")] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            metavar="train|test|NAME:SIDE",
            help="Serve only one side of the dataset's split (a reset at a sample of the other side is refused).",
        ),
    ] = None,
    tool_budget: ToolBudget = None,
    tool_cost: ToolCost = None,
    execution_score: Annotated[
        bool, typer.Option("--execution-score", help="Also score next-cell predictions by running them.")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's log level.")] = "info",
) -> None:
    """Serve the env over the network (OpenEnv): each WebSocket session is one episode with its own kernel.

    The env's rarer options (tool_cost, history_length, ...) keep their defaults here; Python's
    `themisto_env.bridges.openenv.serve` takes them all."""
    from themisto_env.bridges.openenv.deps import require_openenv

    require_openenv()
    from themisto_env.bridges.gate import check_bind
    from themisto_env.bridges.openenv.capacity import raise_open_file_limit, session_capacity
    from themisto_env.bridges.openenv.server import DEFAULT_WORKERS, serve

    check_bind(host, token)
    if workers is not None and workers < 1:
        from themisto_env.errors import ConfigError

        raise ConfigError(f"--workers is at least 1, got {workers}")
    raise_open_file_limit()  # each session holds a few descriptors: the soft limit (often 1,024) caps them
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
    from themisto_env.env.config import EnvConfig

    EnvConfig(**options)  # an invalid option is one line now, not at the first session
    console.print(
        f"themisto serve: http://{host}:{port} (OpenEnv; WebSocket sessions at /ws, up to {max_sessions}, their "
        f"calls on {workers or min(max_sessions, DEFAULT_WORKERS)} shared threads; "
        "Prometheus metrics at /metrics; "
        f"{'token required' if token else 'no token'})",
        markup=False,
    )
    capacity = session_capacity()
    console.print(capacity.text(), markup=False)
    if max_sessions > capacity.sessions:
        console.print(
            f"warning: --max-sessions {max_sessions} is more than fit here (about {capacity.sessions})", markup=False
        )
    from themisto_env import trace_export

    with trace_export.configured():  # the OTEL_* variables: traces of every session to any OTLP collector
        serve(
            options,
            host=host,
            port=port,
            max_sessions=max_sessions,
            idle_timeout_s=idle_timeout or None,
            token=token,
            workers=workers,
            log_level=log_level,
        )
