"""Where a kernel environment lives, by its id: the sandbox side of ``themisto kernel-env``.

A kernel environment (made by ``themisto kernel-env create``, see
`themisto_env.sandbox.environments.manage`) is named by a content id (a hash of its Python version,
requirements and Debian packages). From the id alone the launchers find it: a venv at
``<cache>/environments/<id>/venv`` for the ``local`` and ``bwrap`` backends, an image
``themisto-kernel-env:<id>`` for ``docker``. Nothing here builds anything.
"""

from __future__ import annotations

import re
from pathlib import Path

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.store.snapshot_store import default_cache_dir

#: Repository part of an environment's kernel image (the tag is the environment's id).
ENV_IMAGE_REPOSITORY = "themisto-kernel-env"
_ID = re.compile(r"^[0-9a-f]{12}$")


def environments_dir() -> Path:
    """``<cache>/environments`` (see `default_cache_dir`)."""
    return default_cache_dir() / "environments"


def environment_dir(env_id: str) -> Path:
    """The folder of the environment with this id (its venv, its record)."""
    if not _ID.match(env_id):
        raise BackendUnavailableError(f"not a kernel environment id: {env_id!r} (12 hexadecimal digits)")
    return environments_dir() / env_id


def environment_python(env_id: str) -> Path:
    """The Python of the environment's venv.

    Raises:
        BackendUnavailableError: The environment is not on this machine (the message says how to make it).
    """
    python = environment_dir(env_id) / "venv" / "bin" / "python"
    if not python.exists():
        raise BackendUnavailableError(
            f"kernel environment {env_id} is not on this machine: create it with "
            "`themisto kernel-env create NAME --requirements FILE` (`themisto kernel-env list` shows those there are)"
        )
    return python


def environment_image(env_id: str) -> str:
    """The docker image of the environment: ``themisto-kernel-env:<id>``."""
    environment_dir(env_id)  # checks the id
    return f"{ENV_IMAGE_REPOSITORY}:{env_id}"
