"""Kernel environments on this machine: the name registry, the records, and the datasets built in each.

Under ``<cache>/environments``: ``registry.json`` (name -> id), ``<id>/environment.json`` (the record),
``<id>/datasets.txt`` (dataset folders built in it). Writers take `locked` and replace files
atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from themisto_env.errors import ConfigError
from themisto_env.sandbox.environments.environment_spec import (
    DATASETS,
    ENVIRONMENT_ID,
    RECORD,
    REGISTRY,
    KernelEnvironmentRecord,
)
from themisto_env.sandbox.environments.location import environment_dir, environments_dir

#: A dataset's manifest (`themisto_env.data.trajectory.MANIFEST`: the data layer, above this one).
_MANIFEST = "manifest.json"


def read_registry() -> dict[str, str]:
    path = environments_dir() / REGISTRY
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: the environment registry is unreadable ({exc}); remove it to start over") from None
    return {str(k): str(v) for k, v in data.items()}


def write_registry(names: dict[str, str]) -> None:
    path = environments_dir() / REGISTRY
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(names.items())), indent=2) + "\n")
    tmp.replace(path)


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive lock under the environments folder (two processes making the same env wait)."""
    folder = environments_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_record(env_id: str) -> KernelEnvironmentRecord | None:
    """The record of the environment with this id, or None if it is not on this machine (or incomplete)."""
    path = environment_dir(env_id) / RECORD
    try:
        record = KernelEnvironmentRecord.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        raise ConfigError(f"{path}: unreadable environment record ({exc}); `themisto kernel-env rm {env_id}`") from None
    return record if record.python.exists() else None


def write_record(record: KernelEnvironmentRecord) -> None:
    path = record.folder / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(indent=2) + "\n")
    tmp.replace(path)


def resolve(name_or_id: str) -> KernelEnvironmentRecord:
    """The environment a name (or id) stands for.

    Raises:
        ConfigError: No such environment here (the message lists those there are).
    """
    names = read_registry()
    env_id = names.get(name_or_id, name_or_id)
    record = read_record(env_id) if ENVIRONMENT_ID.match(env_id) else None
    if record is None:
        known = ", ".join(sorted(names)) or "none"
        raise ConfigError(
            f"no kernel environment {name_or_id!r} here (known: {known}); make it with "
            f"`themisto kernel-env create {name_or_id} --requirements FILE`"
        )
    return record


def names_of(env_id: str) -> list[str]:
    """The names that point at an environment."""
    return sorted(n for n, i in read_registry().items() if i == env_id)


def list_kernel_environments() -> list[KernelEnvironmentRecord]:
    """Every environment on this machine, newest first."""
    folder = environments_dir()
    records = [read_record(p.name) for p in folder.glob("*") if ENVIRONMENT_ID.match(p.name)]
    return sorted((r for r in records if r is not None), key=lambda r: r.created, reverse=True)


def note_dataset(env_id: str, folder: str | Path) -> None:
    """Remember that a dataset was built in this environment (``kernel-env rm`` checks it)."""
    path = environment_dir(env_id) / DATASETS
    entry = str(Path(folder).resolve())
    have = path.read_text().split("\n") if path.exists() else []
    if entry not in have:
        with open(path, "a") as f:
            f.write(entry + "\n")


def datasets_using(env_id: str) -> list[str]:
    """Dataset folders (of those built here) whose manifest still names this environment (read as JSON: the
    manifest's model is the data layer's; a folder whose manifest is gone or unreadable uses none)."""
    path = environment_dir(env_id) / DATASETS
    users = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(Exception):
            environment = json.loads((Path(line) / _MANIFEST).read_text()).get("environment")
            if isinstance(environment, dict) and environment.get("id") == env_id:
                users.append(line)
    return users


__all__ = [
    "datasets_using",
    "list_kernel_environments",
    "locked",
    "names_of",
    "note_dataset",
    "read_record",
    "read_registry",
    "resolve",
    "write_record",
    "write_registry",
]
