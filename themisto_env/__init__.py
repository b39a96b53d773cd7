"""themisto-env: a gymnasium environment for predicting Jupyter development trajectories from runtime state.

Importing the package registers the gymnasium ids ``themisto/NextCell-v0`` and
``themisto/OutputPrediction-v0`` (registration only: nothing is started at import).
"""

from __future__ import annotations

from themisto_env.errors import (
    ActionError,
    BackendUnavailableError,
    ConfigError,
    DataError,
    InfrastructureError,
    KernelDiedError,
    KernelStartError,
    KernelTimeoutError,
    ProviderError,
    SnapshotError,
    ThemistoError,
)

__version__ = "0.1.0"

__all__ = [
    "ActionError",
    "BackendUnavailableError",
    "ConfigError",
    "DataError",
    "InfrastructureError",
    "KernelDiedError",
    "KernelStartError",
    "KernelTimeoutError",
    "ProviderError",
    "SnapshotError",
    "ThemistoError",
    "__version__",
]
