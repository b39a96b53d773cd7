"""The env's kind of kernel: `env_kernel_spec` builds one `KernelSpec` from an env config and its dataset,
once per env, and every part of the env (the state server, the scorer and its disposable kernels, the
templates and warm pools they share) takes it.

What it settles, in one place:

- the **kernel environment**: ``config.kernel.environment``, else the one the dataset was
  built in; resolved here only (it reads the dataset's manifest and the machine's environments);
- the **preloaded modules**: the modules the dataset's cells import, as imported (``sklearn.ensemble``,
  not only ``sklearn``): what the templates, the warm kernels and the disposable kernels all import ahead;
- the **fork policy**: the config's ``kernel.fork`` stays in the spec, whose `KernelSpec.not_forked` says where
  kernels are forked and why not elsewhere.
"""

from __future__ import annotations

import dataclasses

from themisto_env.env.config import EnvConfig
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.resolve import dataset_kernel_environment
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.state.copies import imported_modules

__all__ = ["env_kernel_spec"]


def env_kernel_spec(config: EnvConfig, dataset: Dataset) -> KernelSpec:
    """The kernels of ``config`` over ``dataset``: its ``kernel`` spec (read: the env's own kernels; the
    scorer's take `KernelSpec.with_access` ``"copy"``), with its kernel environment (``config.kernel.environment``,
    else the one the dataset was built in) and the modules the dataset's cells import as preloads.

    Raises:
        BackendUnavailableError: The dataset's environment is not on this machine.
        ConfigError: ``config.kernel.environment`` names no environment here.
    """
    environment = dataset_kernel_environment(dataset.path, config.kernel.environment, backend=config.backend)
    imported = imported_modules(dataset.trajectories.values(), submodules=True)
    preload = tuple(dict.fromkeys((*config.kernel.preload, *imported)))
    return dataclasses.replace(config.kernel, environment=environment, preload=preload, fork=bool(config.kernel.fork))
