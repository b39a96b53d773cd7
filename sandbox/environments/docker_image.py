"""A kernel environment's docker image (``themisto-kernel-env:<id>``), built on first need.

The image holds the venv's exact versions as wheels, installed offline on the kernel image's
debootstrap base (`themisto_env.sandbox.image`) with the environment's Debian packages.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from themisto_env.errors import BackendUnavailableError, ConfigError
from themisto_env.sandbox.environments.environment_registry import locked, write_record
from themisto_env.sandbox.environments.environment_spec import KernelEnvironmentRecord
from themisto_env.sandbox.environments.location import environment_image, environments_dir
from themisto_env.sandbox.environments.venv import run_step

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger("themisto_env")


def build_image(record: KernelEnvironmentRecord, console: Console | None = None) -> str:
    """Build ``themisto-kernel-env:<id>`` from the venv's exact versions unless it exists; return its name.

    Wheels come from the venv's pip (``pip wheel``: cached ones are reused, source distributions built
    here), the base is a debootstrap'ed Debian with the environment's ``--apt`` packages, and the kernel
    image's Dockerfile installs the wheels with no network.

    Raises:
        ConfigError: The environment's Python is not the image's (Debian bookworm's 3.11).
        BackendUnavailableError: No Docker engine, or a build step failed.
    """
    from rich.console import Console

    from themisto_env.sandbox.engine import docker_client, image_exists
    from themisto_env.sandbox.image.build import build_from_wheels, build_lock
    from themisto_env.sandbox.image.debootstrap import DEBOOTSTRAP_INCLUDE
    from themisto_env.sandbox.image.spec import DEBIAN_PYTHON, DEBIAN_SUITE, IMAGE_REPOSITORY, ImageSpec, cache_dir

    name = environment_image(record.id)
    if record.spec.python != DEBIAN_PYTHON:
        raise ConfigError(
            f"docker environments run Debian {DEBIAN_SUITE}'s Python {DEBIAN_PYTHON}; "
            f"this one is Python {record.spec.python}"
        )
    console = console or Console(stderr=True, quiet=True)
    client = docker_client()
    if image_exists(client, name):
        return name
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    wheelhouse = environments_dir() / "wheels"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"image-{record.id}-", dir=environments_dir()) as tmp:
        pins = [f"{n}=={v}" for n, v in sorted(record.packages.items())]
        frozen = Path(tmp) / "frozen.txt"
        frozen.write_text("".join(f"{p}\n" for p in pins))
        wheels = Path(tmp) / "wheels"
        log = record.folder / "image.log"
        command = [str(record.python), "-m", "pip", "wheel", "--no-deps", "--find-links", str(wheelhouse)]
        try:
            run_step("collecting wheels (pip wheel)", [*command, "-w", str(wheels), "-r", str(frozen)], log, console)
        except ConfigError as exc:
            raise BackendUnavailableError(str(exc)) from None
        for wheel in wheels.glob("*.whl"):
            if not (wheelhouse / wheel.name).exists():
                shutil.copy2(wheel, wheelhouse / wheel.name)
        spec = ImageSpec(packages=pins, repository=IMAGE_REPOSITORY)
        include = (*DEBOOTSTRAP_INCLUDE, *record.spec.apt)
        with build_lock(cache / "build.lock", console):
            build_from_wheels(
                client,
                spec,
                name,
                sorted(wheels.glob("*.whl")),
                context=Path(tmp) / "context",
                log=log,
                console=console,
                include=include,
            )
    return name


def ready(record: KernelEnvironmentRecord, backend: str, console: Console | None = None) -> KernelEnvironmentRecord:
    """The environment, ready for ``backend``: its docker image built first where the backend is docker
    and the image is missing (about a minute; later uses are instant).

    Raises:
        BackendUnavailableError: No Docker engine, or the image build failed.
    """
    if backend == "docker" and (record.image is None or not image_present(record.image)):
        if console is None:
            log.warning("building the docker image of kernel environment %s (once; about a minute)", record.id)
        with locked(record.id):
            record.image = build_image(record, console)
            write_record(record)
    return record


def image_present(name: str) -> bool:
    from themisto_env.sandbox.engine import docker_client, image_exists

    return image_exists(docker_client(), name)


__all__ = ["build_image", "image_present", "ready"]
