"""Kernel environments: named, content-addressed package sets that kernels run in (``themisto kernel-env``).

This module makes, removes and chooses environments: a venv with the requirements plus ipykernel and dill
(for ``local`` and ``bwrap``) and, for docker, an image ``themisto-kernel-env:<id>`` with the venv's exact
versions. The id hashes the Python version, the normalised requirements, the Debian packages and
`KERNEL_NEEDS`, so making one again is instant. On disk, under ``<cache>/environments``: ``registry.json``
(name -> id) and per id ``environment.json``, ``venv/`` and ``datasets.txt`` (the datasets built in it).
The parts: `environment_spec`, `environment_registry`, `venv`, `docker_image`, `location` (by id, for the
backends); a dataset's choice is `themisto_env.replay.resolve.dataset_kernel_environment`.
Usage is in docs/kernel-environments.md.
"""

from __future__ import annotations

import contextlib
import shutil
from typing import TYPE_CHECKING

from themisto_env.errors import ConfigError
from themisto_env.sandbox.environments.docker_image import ready
from themisto_env.sandbox.environments.environment_registry import (
    datasets_using,
    locked,
    read_record,
    read_registry,
    resolve,
    write_registry,
)
from themisto_env.sandbox.environments.environment_spec import (
    KernelEnvironmentRecord,
    KernelEnvironmentSpec,
    check_name,
)
from themisto_env.sandbox.environments.venv import Installer, make_venv

if TYPE_CHECKING:
    from rich.console import Console


def create(
    name: str | None,
    spec: KernelEnvironmentSpec,
    *,
    docker: bool = False,
    console: Console | None = None,
    installer: Installer = "pip",
) -> tuple[KernelEnvironmentRecord, bool]:
    """Make the environment of ``spec`` unless it exists, and point ``name`` at it.

    Args:
        name: The name to give it (None: an anonymous environment, known by its id).
        spec: What it holds.
        docker: Also build its docker image.
        console: Where progress goes (None: quiet).
        installer: ``pip`` or ``uv`` (same packages; uv is faster where it is installed).

    Returns:
        The record, and whether it already existed (nothing was built but maybe the image).

    Raises:
        ConfigError: A bad name, a Python that is not here, or pip could not install the requirements
            (the message has pip's error and the log's path).
        BackendUnavailableError: With ``docker``: no engine, or the image build failed.
    """
    if name is not None:
        check_name(name)
    env_id = spec.id
    with locked(env_id):
        record = read_record(env_id)
        cached = record is not None
        if record is None:
            record = make_venv(spec, console, installer)
    if docker:  # built unless there (also when it was removed by hand)
        record = ready(record, "docker", console)
    if name is not None:
        with locked("registry"):
            names = read_registry()
            names[name] = env_id
            write_registry(names)
    return record, cached


def remove(name: str, *, force: bool = False) -> KernelEnvironmentRecord:
    """Remove a name; the environment goes too once no other name points at it and no dataset built
    here uses it (``force`` removes it anyway). Its docker image is removed with it.

    Raises:
        ConfigError: No such environment, or a dataset still uses it (the message names one).
    """
    record = resolve(name)
    with locked("registry"):
        names = read_registry()
        others = [n for n, i in names.items() if i == record.id and n != name]
        users = datasets_using(record.id)
        if users and not others and not force:
            raise ConfigError(
                f"kernel environment {name} ({record.id}) is used by {len(users)} dataset(s), e.g. {users[0]}; "
                "`themisto kernel-env rm --force` removes it anyway"
            )
        names.pop(name, None)
        write_registry(names)
    if not others:
        with locked(record.id):
            if record.image is not None:
                with contextlib.suppress(Exception):
                    from themisto_env.sandbox.engine import docker_client

                    docker_client().images.remove(record.image)
            shutil.rmtree(record.folder, ignore_errors=True)
            record.folder.with_name(f"{record.id}.log").unlink(missing_ok=True)
    return record


__all__ = ["create", "remove"]
