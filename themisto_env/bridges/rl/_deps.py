"""Optional dependencies of the RL adapters, imported on first use with a one-line install hint."""

from __future__ import annotations

import importlib
from types import ModuleType

from themisto_env.errors import ProviderError


def require(module: str, extra: str = "rl") -> ModuleType:
    """Import an optional module, or raise a ProviderError saying which extra installs it.

    Args:
        module: The module to import (``datasets``, ``torch``, ``transformers``, ``trl``, ``tokenizers``).
        extra: The themisto-env extra that provides it.

    Returns:
        The module.

    Raises:
        ProviderError: The module is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ProviderError(f"{module} is not installed ({exc}): pip install 'themisto-env[{extra}]'") from None
