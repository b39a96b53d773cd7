"""themisto-env: a gymnasium environment for predicting Jupyter development trajectories from runtime state.

Importing the package registers the gymnasium ids ``themisto/NextCell-v0`` and
``themisto/OutputPrediction-v0`` (registration only: nothing is started at import). It re-exports,
lazily (each imported from its module on first use), the exception tree ([`themisto_env.errors`][themisto_env.errors])
and the names most code starts from: the env, its actions and options, the dataset, samples and trajectories;
and the verifiers taskset and harness (``ThemistoTaskset``, ``ThemistoHarness``: the package is a
verifiers 0.4 environment, ``vf-eval themisto-env``; see `themisto_env.bridges.vf_env`). Each
subpackage owns one job (``data``, ``replay``, ``scoring``, ``env``, ``run``, ``bridges``, ``agents``,
``sandbox``, ``metrics``; see docs/architecture.md). A package's face is its ``__init__.pyi``: a line per
public name, from the module that defines it; ``lazy_loader.attach_stub`` makes ``__all__`` from it and
imports each name when first used.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)


def _register_envs() -> None:
    """Register the gymnasium ids (registration only: no env, kernel or dataset is touched)."""
    from gymnasium.envs.registration import register, registry

    for env_id, task in (("themisto/NextCell-v0", "next-cell"), ("themisto/OutputPrediction-v0", "output")):
        if env_id not in registry:
            register(id=env_id, entry_point="themisto_env.env.core:ThemistoEnv", kwargs={"task": task})


_register_envs()
