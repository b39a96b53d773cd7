"""The optional dependencies of the OpenEnv bridge, checked with a one-line install hint."""

from __future__ import annotations

from themisto_env.errors import import_extra

__all__ = ["require_openenv"]


def require_openenv() -> None:
    """Check that the ``serve`` extra (``openenv-core``, ``prometheus-client``) is installed.

    Raises:
        ProviderError: A package of it is not (the message says which, and which extra installs it).
    """
    import_extra("openenv.core", "serve", name="openenv-core")
    import_extra("prometheus_client", "serve", name="prometheus-client")
