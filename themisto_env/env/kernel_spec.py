"""The env's kind of kernel: `env_kernel_spec` builds one `KernelSpec` from an env config and its dataset,
once per env, and every part of the env (the state server, the scorer and its disposable kernels, the
templates and warm pools they share) takes it.

What it settles, in one place:

- the **kernel environment** (`kernel_environment`): ``config.environment``, else the one the dataset was
  built in; resolved here only (it reads the dataset's manifest and the machine's environments);
- the **preloaded modules**: the modules the dataset's cells import, as imported (``sklearn.ensemble``,
  not only ``sklearn``): what the templates, the warm kernels and the disposable kernels all import ahead;
- the **fork policy**: the config's ``kernel.fork`` stays in the spec, whose `KernelSpec.not_forked` says where
  kernels are forked and why not elsewhere.
"""

from __future__ import annotations

import dataclasses
import enum

from themisto_env.env.config import EnvConfig
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.resolve import dataset_kernel_environment
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.state.copies import imported_modules

__all__ = ["FROM_DATASET", "EnvironmentChoice", "env_kernel_spec", "kernel_environment"]


class _FromDataset(enum.Enum):
    FROM_DATASET = "the dataset's kernel environment"


#: The default ``environment`` of `env_kernel_spec`: the kernel environment the dataset and config name
#: (`kernel_environment`).
FROM_DATASET = _FromDataset.FROM_DATASET
EnvironmentChoice = str | None | _FromDataset


def kernel_environment(config: EnvConfig, dataset: Dataset) -> str | None:
    """The kernel environment id the kernels of ``config`` over ``dataset`` run in (None: the tool's own
    Python): ``config.environment``, else the one the dataset was built in.

    Raises:
        BackendUnavailableError: The dataset's environment is not on this machine.
        ConfigError: ``config.environment`` names no environment here.
    """
    return dataset_kernel_environment(dataset.path, config.environment, backend=config.backend)


def env_kernel_spec(
    config: EnvConfig, dataset: Dataset, *, environment: EnvironmentChoice = FROM_DATASET
) -> KernelSpec:
    """The kernels of ``config`` over ``dataset``: its ``kernel`` spec (read: the env's own kernels; the
    scorer's take `KernelSpec.with_access` ``"copy"``), with its kernel environment (``environment``, by
    default the config's or the dataset's: `kernel_environment`) and the modules the dataset's cells import
    as preloads.

    Raises:
        BackendUnavailableError: The dataset's environment is not on this machine.
        ConfigError: ``config.environment`` names no environment here.
    """
    if isinstance(environment, _FromDataset):
        environment = kernel_environment(config, dataset)
    imported = imported_modules(dataset.trajectories.values(), submodules=True)
    preload = tuple(dict.fromkeys((*config.kernel.preload, *imported)))
    return dataclasses.replace(config.kernel, environment=environment, preload=preload, fork=config.fork)
