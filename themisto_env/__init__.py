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


def _register_envs() -> None:
    """Register the gymnasium ids (registration only: no env, kernel or dataset is touched)."""
    from gymnasium.envs.registration import register, registry

    for env_id, task in (("themisto/NextCell-v0", "next-cell"), ("themisto/OutputPrediction-v0", "output")):
        if env_id not in registry:
            register(id=env_id, entry_point="themisto_env.env.core:ThemistoEnv", kwargs={"task": task})


_register_envs()
