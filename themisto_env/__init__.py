"""themisto-env: a gymnasium environment for predicting Jupyter development trajectories from runtime state.

Importing the package registers the gymnasium ids ``themisto/NextCell-v0`` and
``themisto/OutputPrediction-v0`` (registration only: nothing is started at import). It re-exports the
exception tree (:mod:`themisto_env.errors`) and, lazily (imported on first use), the names most code
starts from: the env, its actions and options, the dataset, samples and trajectories; and the verifiers
taskset and harness (``ThemistoTaskset``, ``ThemistoHarness``: the package is a verifiers 0.4 environment,
``vf-eval themisto-env``; see :mod:`themisto_env.bridges.vf_env`). Each subpackage
owns one job (``data``, ``replay``, ``scoring``, ``env``, ``run``, ``bridges``, ``agents``, ``sandbox``,
``metrics``; see docs/architecture.md) and pins its public names in ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports
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

if TYPE_CHECKING:
    from themisto_env.bridges.vf_taskset import ThemistoHarness, ThemistoTaskset
    from themisto_env.data.samples import Sample, SampleRule
    from themisto_env.data.trajectory import Trajectory
    from themisto_env.env.actions import Prediction
    from themisto_env.env.core import EnvConfig, ThemistoEnv
    from themisto_env.env.tools import ToolCall
    from themisto_env.replay.dataset import Dataset

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.bridges.vf_taskset": ("ThemistoHarness", "ThemistoTaskset"),
        "themisto_env.data.samples": ("Sample", "SampleRule"),
        "themisto_env.data.trajectory": ("Trajectory",),
        "themisto_env.env.actions": ("Prediction",),
        "themisto_env.env.core": ("EnvConfig", "ThemistoEnv"),
        "themisto_env.env.tools": ("ToolCall",),
        "themisto_env.replay.dataset": ("Dataset",),
    },
)

__all__ = [
    "ActionError",
    "BackendUnavailableError",
    "ConfigError",
    "DataError",
    "Dataset",
    "EnvConfig",
    "InfrastructureError",
    "KernelDiedError",
    "KernelStartError",
    "KernelTimeoutError",
    "Prediction",
    "ProviderError",
    "Sample",
    "SampleRule",
    "SnapshotError",
    "ThemistoEnv",
    "ThemistoError",
    "ThemistoHarness",
    "ThemistoTaskset",
    "ToolCall",
    "Trajectory",
    "__version__",
]


def _register_envs() -> None:
    """Register the gymnasium ids (registration only: no env, kernel or dataset is touched)."""
    from gymnasium.envs.registration import register, registry

    for env_id, task in (("themisto/NextCell-v0", "next-cell"), ("themisto/OutputPrediction-v0", "output")):
        if env_id not in registry:
            register(id=env_id, entry_point="themisto_env.env.core:ThemistoEnv", kwargs={"task": task})


_register_envs()
