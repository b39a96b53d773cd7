"""The env over the network: an OpenEnv server and client (``pip install 'themisto-env[serve]'``).

* :mod:`~themisto_env.bridges.openenv.models`: the typed action, observation and state.
* :mod:`~themisto_env.bridges.openenv.environment`: one session's episode behind OpenEnv's ``Environment``.
* :mod:`~themisto_env.bridges.openenv.server`: the app (``themisto serve``): sessions, idle timeout, token.
* :mod:`~themisto_env.bridges.openenv.client`: :class:`ThemistoEnvClient`, OpenEnv's ``EnvClient`` for it.

``openenv-core`` is imported on first use of a name here; :func:`require_openenv` says how to install it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports
from themisto_env.bridges.openenv.deps import require_openenv

if TYPE_CHECKING:
    from themisto_env.bridges.openenv.client import ThemistoEnvClient
    from themisto_env.bridges.openenv.environment import ThemistoServedEnv
    from themisto_env.bridges.openenv.models import ThemistoAction, ThemistoObservation, ThemistoState
    from themisto_env.bridges.openenv.server import create_server_app, serve

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.bridges.openenv.client": ("ThemistoEnvClient",),
        "themisto_env.bridges.openenv.environment": ("ThemistoServedEnv",),
        "themisto_env.bridges.openenv.models": ("ThemistoAction", "ThemistoObservation", "ThemistoState"),
        "themisto_env.bridges.openenv.server": ("create_server_app", "serve"),
    },
)

__all__ = [
    "ThemistoAction",
    "ThemistoEnvClient",
    "ThemistoObservation",
    "ThemistoServedEnv",
    "ThemistoState",
    "create_server_app",
    "require_openenv",
    "serve",
]
