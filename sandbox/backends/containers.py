"""Kernel containers as the host keeps track of them: labels, owners, stale ones, and what the host sees.

Each kernel container gets a unique name (``themisto-kernel-<hex>``) and labels (`container_labels`)
that let `remove_stale_containers` find containers whose host process died:
``themisto-env.kernel=1``, ``themisto-env.host`` (host name), ``themisto-env.host-pid``,
``themisto-env.host-pid-start`` (the process's start time, so a reused pid is not mistaken for the
owner) and ``themisto-env.created``. The label names are defined in `themisto_env.sandbox.lifetime.leftovers`
(the reaper, which must not import the docker backend, reads them too).

What the host can see of a running container without asking the engine is here as well: its processes
in ``/proc`` (when the host shares dockerd's pid namespace), its cgroup's limit events, and how it ended
(exit code or signal, its last log line).

The docker SDK is imported only inside the functions; importing this module has no side effects.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import signal
import socket
import stat
from pathlib import Path
from typing import Any

from themisto_env.sandbox.engine import engine
from themisto_env.sandbox.kernel.launcher import KERNEL_ENVIRONMENT
from themisto_env.sandbox.lifetime.leftovers import (
    LABEL_CREATED,
    LABEL_HOST,
    LABEL_HOST_PID,
    LABEL_HOST_PID_START,
    LABEL_KERNEL,  # on every kernel container (value "1")
)
from themisto_env.sandbox.lifetime.owners import process_start
from themisto_env.sandbox.models import SandboxLimits

__all__ = [
    "KERNEL_UID",
    "cgroup_limit_events",
    "container_labels",
    "container_name",
    "grant_kernel_access",
    "host_children",
    "host_cmdline",
    "kernel_container_options",
    "last_log_line",
    "owner_alive",
    "remove_stale_containers",
    "signal_name",
]

#: The user the kernel runs as inside the container.
KERNEL_UID = 1000


def container_name() -> str:
    """A new kernel container's unique name, ``themisto-kernel-<hex>``."""
    return f"themisto-kernel-{secrets.token_hex(6)}"


def container_labels() -> dict[str, str]:
    """The labels of a new kernel container: it is a kernel's, and this process on this host owns it."""
    return {
        LABEL_KERNEL: "1",
        LABEL_HOST: socket.gethostname(),
        LABEL_HOST_PID: str(os.getpid()),
        LABEL_HOST_PID_START: process_start(os.getpid()) or "",
        LABEL_CREATED: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def kernel_container_options(
    limits: SandboxLimits, volumes: dict[Path, str], *, readonly: set[Path], workdir: Path
) -> dict[str, Any]:
    """The docker SDK's ``containers.run`` options of a kernel container (DESIGN.md section 5): no network,
    a read-only root with a ``/tmp`` tmpfs, a non-root user without capabilities, memory (no swap beyond
    it), CPU and process limits, and ``volumes`` (host path: path inside) bind-mounted, read-only where
    ``readonly``, with ``workdir`` as its working directory."""
    return {
        "detach": True,
        "init": True,
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={limits.memory_mb}m,mode=1777"},
        "user": f"{KERNEL_UID}:{KERNEL_UID}",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids,
        "volumes": {str(p): {"bind": target, "mode": "ro" if p in readonly else "rw"} for p, target in volumes.items()},
        "working_dir": str(workdir),
        # $PWD names the working folder; $HOME the tmpfs (the kernel's user has no home).
        "environment": {**KERNEL_ENVIRONMENT, "PWD": str(workdir), "HOME": "/tmp"},
        "stdin_open": False,
        "tty": False,
    }


def grant_kernel_access(folder: Path, *, write: bool = True) -> None:
    """Make ``folder`` usable by the kernel's uid (``o+rwx``, or ``o+rx`` for a read-only mount), adding
    bits only where they are missing (never recursively, never removing bits)."""
    st = folder.stat()
    bits = 0o007 if write else 0o005
    if st.st_uid == KERNEL_UID or st.st_mode & bits == bits:
        return
    with contextlib.suppress(PermissionError):
        os.chmod(folder, stat.S_IMODE(st.st_mode) | bits)


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the host process named in a container's labels is still running."""
    try:
        pid = int(labels.get(LABEL_HOST_PID, ""))
    except ValueError:
        return False
    start = process_start(pid)
    if start is None:
        return False
    recorded = labels.get(LABEL_HOST_PID_START)
    return recorded is None or recorded == start


def remove_stale_containers(*, dry_run: bool = False) -> list[str]:
    """Remove (with ``dry_run``: only list) the kernel containers of this host whose owner is dead.

    Containers of live processes, and of other hosts sharing the engine, are left alone.

    Raises:
        BackendUnavailableError: No engine answers.
    """
    import docker
    import docker.errors

    client = None
    with engine(client):
        client = docker.from_env()
        # A container removed between the listing and its inspection (by its owner, or another
        # process sharing the engine) is skipped, not an error.
        containers = client.containers.list(all=True, filters={"label": f"{LABEL_KERNEL}=1"}, ignore_removed=True)
    host = socket.gethostname()
    removed: list[str] = []
    for container in containers:
        labels = container.labels or {}
        if labels.get(LABEL_HOST, host) != host or owner_alive(labels):
            continue
        with contextlib.suppress(docker.errors.NotFound), engine(client):
            if not dry_run:
                container.remove(force=True)
            removed.append(container.name)
    return removed


# -- what the host sees of a container ---------------------------------------------------------------------


def host_cmdline(pid: int) -> list[str]:
    """A host process's command line (``[]`` if it is gone or not visible)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def host_children(pid: int) -> list[int]:
    """The pids of a host process's children (``[]`` if it is gone or not visible)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []
    return found


def _counter(path: Path, key: str, name: str) -> dict[str, int]:
    """``{name: value}`` of the line ``key value`` of a cgroup file, if the file exists and is non-zero."""
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key and int(parts[1]):
                return {name: int(parts[1])}
    except (OSError, ValueError):
        pass
    return {}


def cgroup_limit_events(container_id: str) -> dict[str, int]:
    """Limit hits (``oom_kill``, ``pids_max``) from a container's cgroup on the host (v1 or v2, cgroupfs or
    systemd driver): the kernel in it cannot forge them."""
    cid = container_id
    events: dict[str, int] = {}
    for folder in (
        Path("/sys/fs/cgroup/memory/docker", cid),  # v1, cgroupfs
        Path("/sys/fs/cgroup/memory/system.slice", f"docker-{cid}.scope"),  # v1, systemd
        Path("/sys/fs/cgroup/docker", cid),  # v2, cgroupfs
        Path("/sys/fs/cgroup/system.slice", f"docker-{cid}.scope"),  # v2, systemd
    ):
        for name in ("memory.oom_control", "memory.events"):
            events.update(_counter(folder / name, "oom_kill", "oom_kill"))
    for folder in (
        Path("/sys/fs/cgroup/pids/docker", cid),
        Path("/sys/fs/cgroup/pids/system.slice", f"docker-{cid}.scope"),
        Path("/sys/fs/cgroup/docker", cid),
        Path("/sys/fs/cgroup/system.slice", f"docker-{cid}.scope"),
    ):
        events.update(_counter(folder / "pids.events", "max", "pids_max"))
    return events


def signal_name(code: int) -> str:
    """The signal behind an exit code above 128 (``SIGKILL`` for 137)."""
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return f"signal {code - 128}"


def last_log_line(container: Any) -> str | None:
    """The container's last log line after ipykernel's start-up banner, if any (None also when the engine
    cannot be asked)."""
    with contextlib.suppress(Exception):
        lines = container.logs(tail=50).decode(errors="replace").splitlines()
        # ipykernel's start-up banner ends with "--existing FILE": only what follows is news.
        banner_end = max((i for i, line in enumerate(lines) if "--existing" in line), default=-1)
        news = [line for line in lines[banner_end + 1 :] if line.strip()]
        if news:
            return news[-1]
    return None
