"""The MCP servers ready to run: `episode_server` (one episode per session, over the env's options) and the
HTTP endpoint `episode_endpoint` that ``themisto serve`` mounts at ``/mcp``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.lowlevel import Server

from themisto_env.agents.prompting import load_prompts
from themisto_env.bridges.mcp.server import Sessions, build_server
from themisto_env.bridges.mcp.session import EpisodeSession
from themisto_env.bridges.mcp.tools import listed_tools
from themisto_env.bridges.mcp.transports import McpEndpoint
from themisto_env.env.config import env_config_and_dataset
from themisto_env.env.episode import Episode

__all__ = ["episode_endpoint", "episode_server"]


def episode_server(
    options: Mapping[str, Any] | None = None, *, workers: int = 64, http: bool = False
) -> tuple[Server, Sessions]:
    """The MCP server of the env over ``options`` ([`EnvConfig`][themisto_env.env.EnvConfig]'s, as ``themisto
    serve`` takes them) and its sessions, each an `EpisodeSession`.

    The options are checked here, once, by making (and closing) an episode: no kernel starts. The sessions
    share the opened dataset and the prompt templates; ``http``: served over streamable HTTP (see
    `build_server`).

    Raises:
        ConfigError: Bad options (or a dataset that cannot be opened: DataError).
    """
    config, dataset = env_config_and_dataset(dict(options or {}))
    Episode(config, dataset).close()  # bad options fail here, in one line, before anything listens
    shared = {**dict(options or {}), "dataset": dataset}
    prompts = load_prompts()
    sessions = Sessions(lambda: EpisodeSession(shared, prompts=prompts), workers=workers)
    server = build_server(sessions, lambda: listed_tools(config.task, config.observation), handshake_only=http)
    return server, sessions


def episode_endpoint(
    options: Mapping[str, Any] | None = None,
    *,
    idle_timeout_s: float | None = 600.0,
    host: str = "127.0.0.1",
    workers: int = 64,
) -> McpEndpoint:
    """`episode_server` as a streamable-HTTP endpoint (ASGI), to mount (`mount_mcp`)."""
    server, sessions = episode_server(options, workers=workers, http=True)
    return McpEndpoint(server, sessions, idle_timeout_s=idle_timeout_s, host=host)
