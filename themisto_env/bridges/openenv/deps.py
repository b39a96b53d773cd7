"""The optional dependencies of the OpenEnv bridge, checked with a one-line install hint."""

from __future__ import annotations

import importlib.util

from themisto_env.errors import ProviderError

__all__ = ["require_openenv"]

#: What ``themisto serve`` imports (module, distribution): the server and its ``/metrics``.
_SERVE_MODULES = (("openenv.core", "openenv-core"), ("prometheus_client", "prometheus-client"))


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package is missing
        return True


def require_openenv() -> None:
    """Check that the ``serve`` extra (``openenv-core``, ``prometheus-client``) is installed.

    Raises:
        ProviderError: A package of it is not (the message says which, and which extra installs it).
    """
    for module, distribution in _SERVE_MODULES:
        if _missing(module):
            raise ProviderError(f"{distribution} is not installed: pip install 'themisto-env[serve]'")
