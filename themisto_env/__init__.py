"""themisto-env: a gymnasium environment for predicting Jupyter development trajectories from runtime state.

Importing the package registers the gymnasium ids ``themisto/NextCell-v0`` and ``themisto/OutputPrediction-v0``
(registration only: nothing is started at import). Its face holds the version, the roots of the exception tree
([`themisto_env.errors`][themisto_env.errors] has all of it) and verifiers' taskset and harness (verifiers 0.4 finds
them by this package's ``__all__``: ``vf-eval themisto-env``). Every other name has one face, its layer's: the env in
``themisto_env.env``, the dataset in ``themisto_env.replay``, trajectories and samples in ``themisto_env.data``
(see docs/architecture.md). A face is a package's ``__init__.pyi``, a line per name; ``lazy_loader.attach_stub``
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
