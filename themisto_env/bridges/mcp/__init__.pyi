"""The public names of `themisto_env.bridges.mcp`, a line each (``__init__.py`` imports each on first use)."""

from .app import episode_endpoint as episode_endpoint
from .app import episode_server as episode_server
from .session import EpisodeSession as EpisodeSession
from .transports import http_app as http_app
from .transports import mount_mcp as mount_mcp
from .transports import run_stdio as run_stdio
