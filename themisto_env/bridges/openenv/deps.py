"""The optional dependency of the OpenEnv bridge, checked with a one-line install hint."""

from __future__ import annotations

import importlib.util

from themisto_env.errors import ProviderError

__all__ = ["require_openenv"]


def require_openenv() -> None:
    """Check that ``openenv-core`` is installed.

    Raises:
        ProviderError: It is not (the message says which extra installs it).
    """
    if importlib.util.find_spec("openenv") is None or importlib.util.find_spec("openenv.core") is None:
        raise ProviderError("openenv-core is not installed: pip install 'themisto-env[serve]'")
