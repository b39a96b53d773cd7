"""What dead owners left: run directories, kernel processes and containers, found and removed.

A run directory whose owner (see :mod:`themisto_env.sandbox.owners`) is dead is a *leftover*; with it go
the kernel processes it records (if their start time still matches) and its containers. ``themisto
sandbox gc``, the reaper and a process's first kernel start remove them (:func:`collect`,
:func:`remove`). Run directories of owners on other hosts (a ``/tmp`` shared with a container) are never
touched; directories without an owner record (older versions) only when they are older than
:data:`UNOWNED_GRACE_S` and no process works in them.

Standard library only (the docker SDK is imported when a container must go) and :mod:`owners
<themisto_env.sandbox.owners>`: the reaper loads it without running the package's ``__init__`` (see
:func:`themisto_env.sandbox.lifetime.reaper_command`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto_env.sandbox.owners import (
    RUN_DIR_PREFIX,
    SHORT_ROOTS,
    kill_process,
    owner_state,
    process_start,
    read_owner,
    same_owner,
)

#: A run directory without an owner record is left alone while younger than this (it is being made).
UNOWNED_GRACE_S = 60.0

# Container labels (set by the docker backend; read here to find a dead owner's containers).
LABEL_KERNEL = "themisto-env.kernel"
LABEL_HOST = "themisto-env.host"
LABEL_HOST_PID = "themisto-env.host-pid"
LABEL_HOST_PID_START = "themisto-env.host-pid-start"
LABEL_CREATED = "themisto-env.created"


@dataclass
class Leftover:
    """A run directory a dead owner left, with the processes and containers it records."""

    run_dir: Path
    record: dict[str, Any] | None  # None: no owner record (and no process works in it)
    processes: list[dict[str, Any]] = field(default_factory=list)  # still running, same start time
    containers: list[str] = field(default_factory=list)

    @property
    def owner(self) -> str:
        if self.record is None:
            return "no owner record"
        owner = self.record["owner"]
        return f"owner pid {owner.get('pid')} dead, {self.record.get('backend', '?')}"


def default_roots() -> list[Path]:
    """Where run directories are made: the temporary directory (``TMPDIR``), ``/tmp``, and the short folders
    used when ``TMPDIR`` is too deep for kernel sockets (`themisto_env.sandbox.run_root`)."""
    short = [base / f"themisto-{os.getuid()}" for base in SHORT_ROOTS]
    roots = [Path(tempfile.gettempdir()), Path("/tmp"), *short]
    return list(dict.fromkeys(p.resolve() for p in roots if p.is_dir()))


def run_dirs(roots: Iterable[Path] | None = None) -> Iterator[Path]:
    """Every kernel run directory under the roots."""
    for root in default_roots() if roots is None else roots:
        with contextlib.suppress(OSError):
            for path in sorted(Path(root).glob(f"{RUN_DIR_PREFIX}*")):
                if path.is_dir() and not path.is_symlink():
                    yield path


def _in_use(run_dir: Path) -> bool:
    """Whether any process works in (or below) the directory. Processes whose working directory cannot be
    read (another user's) are skipped: their directories in a sticky ``/tmp`` are not ours to remove."""
    prefix = str(run_dir.resolve())
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + "/"):
            return True
    return False


def leftovers(roots: Iterable[Path] | None = None, *, owner: dict[str, Any] | None = None) -> list[Leftover]:
    """Run directories whose owner is dead (with ``owner``: only that owner's).

    Directories of live owners and of other hosts are never listed; directories without an owner record
    only when they are older than UNOWNED_GRACE_S and no process works in them.
    """
    found: list[Leftover] = []
    for run_dir in run_dirs(roots):
        record = read_owner(run_dir)
        if record is None:
            if owner is not None:
                continue
            try:
                age = time.time() - run_dir.stat().st_mtime
            except OSError:
                continue
            if age > UNOWNED_GRACE_S and not _in_use(run_dir):
                found.append(Leftover(run_dir, None))
            continue
        if owner is not None and not same_owner(record["owner"], owner):
            continue
        if owner is None and owner_state(record["owner"]) != "dead":
            continue
        processes = [
            p
            for p in record.get("processes", [])
            if isinstance(p, dict) and p.get("start") and process_start(int(p.get("pid", 0))) == p["start"]
        ]
        containers = [str(c) for c in record.get("containers", []) if c]
        found.append(Leftover(run_dir, record, processes, containers))
    return found


def engine_unreachable(exc: BaseException) -> bool:
    """Whether a docker SDK exception means the engine could not be reached (not an answer from it)."""
    import docker.errors

    if isinstance(exc, docker.errors.APIError):  # the engine answered (404, 409, 500, ...)
        return False
    # requests' ConnectionError and Timeout are OSErrors; the SDK wraps some in DockerException.
    return isinstance(exc, (OSError, docker.errors.DockerException))


def remove_containers(ids: Iterable[str], *, dry_run: bool = False) -> list[str]:
    """Remove containers by id (gone ones are skipped); return the names removed.

    Raises:
        docker.errors.DockerException, requests.exceptions.RequestException: The engine is unreachable.
    """
    import docker
    import docker.errors

    ids = list(ids)
    if not ids:
        return []
    client = docker.from_env()
    removed: list[str] = []
    for container_id in ids:
        try:
            container = client.containers.get(container_id)
            if not dry_run:
                container.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed.append(str(container.name))
    return removed


def owner_containers(owner: dict[str, Any]) -> list[str]:
    """Ids of the kernel containers labelled with this owner (docker engine from the environment)."""
    import docker

    client = docker.from_env()
    labels = [f"{LABEL_KERNEL}=1", f"{LABEL_HOST_PID}={owner.get('pid')}"]
    return [
        str(c.id)
        for c in client.containers.list(all=True, filters={"label": labels})
        if (c.labels or {}).get(LABEL_HOST) == owner.get("host")
        and (c.labels or {}).get(LABEL_HOST_PID_START) in (owner.get("start"), None)
    ]


def remove(leftover: Leftover, *, dry_run: bool = False, containers: bool = True) -> list[str]:
    """Remove what a leftover holds: kill its processes, remove its containers, then its directory.

    Args:
        containers: Remove the containers it names (else leave them to the label-based cleanup).

    Returns:
        One line per item (``killed ...``, ``removed ...``; ``would ...`` with ``dry_run``). If its
        containers cannot be removed (no engine) a ``warning:`` line says so, and the directory still goes.
    """
    verb = "would remove" if dry_run else "removed"
    lines: list[str] = []
    for process in leftover.processes:
        if dry_run or kill_process(process):
            lines.append(f"{'would kill' if dry_run else 'killed'} kernel process {process['pid']} ({leftover.owner})")
    if containers and leftover.containers:
        try:
            for name in remove_containers(leftover.containers, dry_run=dry_run):
                lines.append(f"{verb} container {name} ({leftover.owner})")
        except Exception as exc:  # no engine: the labelled container goes at the next gc with one
            ids = ", ".join(c[:12] for c in leftover.containers)
            lines.append(f"warning: could not remove containers {ids}: {' '.join(str(exc).split())[:200]}")
    if not dry_run:
        shutil.rmtree(leftover.run_dir, ignore_errors=True)
    lines.append(f"{verb} run dir {leftover.run_dir} ({leftover.owner})")
    return lines


def collect(roots: Iterable[Path] | None = None, *, dry_run: bool = False, containers: bool = True) -> list[str]:
    """Remove every leftover of dead owners under the roots (see :func:`remove`); return its lines.

    Containers are removed by the ids recorded in run directories; for every labelled container of a
    dead owner use :func:`themisto_env.sandbox.docker_containers.remove_stale_containers`."""
    lines: list[str] = []
    for leftover in leftovers(roots):
        lines += remove(leftover, dry_run=dry_run, containers=containers)
    return lines
