"""Kernel environments: named, content-addressed package sets that kernels run in (``themisto kernel-env``).

This module makes, removes and chooses environments: a venv with the requirements plus ipykernel and dill
(for ``local`` and ``bwrap``) and, for docker, an image ``themisto-kernel-env:<id>`` with the venv's exact
versions. The id hashes the Python version, the normalised requirements, the Debian packages and
`KERNEL_NEEDS`, so making one again is instant. On disk, under ``<cache>/environments``: ``registry.json``
(name -> id) and per id ``environment.json``, ``venv/`` and ``datasets.txt`` (the datasets built in it).
The parts: `kernel_environment_spec`, `kernel_environment_registry`, `kernel_environment_venv`,
`kernel_environment_image`. Usage is in docs/kernel-environments.md.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from themisto_env.errors import BackendUnavailableError, ConfigError
from themisto_env.replay.kernel_environment_image import ready
from themisto_env.replay.kernel_environment_registry import (
    datasets_using,
    locked,
    names_of,
    note_dataset,
    read_record,
    read_registry,
    resolve,
    write_registry,
)
from themisto_env.replay.kernel_environment_spec import (
    REQUIREMENTS_FILE,
    KernelEnvironmentRecord,
    KernelEnvironmentSpec,
    check_name,
)
from themisto_env.replay.kernel_environment_venv import Installer, make_venv
from themisto_env.sandbox.store.snapshots import DEFAULT_ENVIRONMENT

if TYPE_CHECKING:
    from rich.console import Console

    from themisto_env.data.trajectory import EnvironmentRef, Manifest


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


def create_command(ref: EnvironmentRef, folder: str | Path) -> str:
    """The command that makes a dataset's environment again (from ``environment-requirements.txt``)."""
    parts = [
        "themisto kernel-env create",
        ref.name or f"env-{ref.id}",
        "--requirements",
        str(Path(folder) / REQUIREMENTS_FILE),
    ]
    parts += [f"--apt {package}" for package in ref.apt]
    parts.append(f"--python {ref.python}")
    return " ".join(parts)


def use_kernel_environment(name_or_id: str | None, *, backend: str, manifest: Manifest, out: str | Path) -> str | None:
    """For ``themisto data build --kernel-env``: the environment's id (None: the tool's own Python), recorded in
    ``manifest`` with its requirements (also written to ``out/environment-requirements.txt``).

    Raises:
        ConfigError: No such environment.
        BackendUnavailableError: Its docker image is needed and cannot be built.
    """
    from themisto_env.data.trajectory import EnvironmentRef

    if name_or_id is None or name_or_id == DEFAULT_ENVIRONMENT:
        manifest.environment = None
        return None
    record = ready(resolve(name_or_id), backend)
    names = names_of(record.id)
    manifest.environment = EnvironmentRef(
        id=record.id,
        name=name_or_id if name_or_id in names else (names[0] if names else None),
        python=record.spec.python,
        requirements=record.spec.requirements_txt(),
        apt=record.spec.apt,
    )
    (Path(out) / REQUIREMENTS_FILE).write_text(record.spec.requirements_txt())
    note_dataset(record.id, out)
    return record.id


def dataset_kernel_environment(folder: str | Path, choice: str | None = None, *, backend: str = "local") -> str | None:
    """The environment a dataset's kernels run in: ``choice`` (a name or id; ``default``: the tool's own
    Python), else the one its manifest records.

    Raises:
        BackendUnavailableError: The dataset's environment is not on this machine (the message is the
            command that makes it again), or its docker image cannot be built.
        ConfigError: ``choice`` names no environment here.
    """
    from themisto_env.data.trajectory import read_manifest

    if choice == DEFAULT_ENVIRONMENT:
        return None
    if choice is not None:
        return ready(resolve(choice), backend).id
    ref = read_manifest(folder).environment
    if ref is None:
        return None
    record = read_record(ref.id)
    if record is None:
        raise BackendUnavailableError(
            f"{folder} was replayed in kernel environment {ref.id}, which is not on this machine: make it with "
            f"`{create_command(ref, folder)}`"
        )
    return ready(record, backend).id


__all__ = ["create", "create_command", "dataset_kernel_environment", "remove", "use_kernel_environment"]
