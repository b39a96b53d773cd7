"""The env over the network: an OpenEnv server and client (``pip install 'themisto-env[serve]'``).

* `models`: the typed action, observation and state.
* `environment`: one session's episode behind OpenEnv's ``Environment``.
* `server`: the app (``themisto serve``): sessions, idle timeout, token.
* `server_metrics`: its Prometheus metrics (`GET /metrics`), counted by the metered parts of
  `metered`.
* `client`: [`ThemistoEnvClient`][themisto_env.bridges.openenv.ThemistoEnvClient], OpenEnv's ``EnvClient`` for it.

``openenv-core`` is imported on first use of a name here;
`require_openenv` says how to install it.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
