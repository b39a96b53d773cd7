"""Kernels never outlive their owner: owner records, the reaper, and garbage collection.

A kernel's *owner* is the host process that started it. Three things make sure that what an owner
started goes when the owner goes, however it goes:

- a normal interpreter exit closes every kernel still open (an ``atexit`` hook over a weak set of started
  kernels, registered at the first start: importing this module has no side effects);
- every run directory holds ``owner.json`` (see :func:`write_owner`): who owns it (host, boot, pid and the
  pid's start time, so a reused pid is never taken for the owner), the backend, the kernel's host
  processes (pid and start time) and containers;
- at a process's first kernel start a small *reaper* process is started in its own session. It waits for
  the owner to die (``pidfd_open``, else a poll once a second) and then removes what the owner left:
  kills the recorded kernel processes (only if their start time still matches), removes its containers,
  removes its run directories. A ``SIGKILL``\\ed owner thus takes its kernels with it on every backend
  (local kernels also end by themselves: ipykernel's parent poller watches ``JPY_PARENT_PID``; bwrap
  kernels die with bwrap's ``--die-with-parent``).

What a dead owner left behind anyway (its reaper was killed too, the machine was short of memory, ...) is
removed by ``themisto sandbox gc`` and, for the run directories of the same temporary root, at the next
process's first kernel start. Run directories of owners on other hosts (a ``/tmp`` shared with a
container) are never touched; directories without an owner record (older versions) only when no process
works in them.

This module uses the standard library only (the docker SDK is imported when a container must go): the
reaper loads it by file path, without importing the package, to stay small (about 10 MB).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Prefix of every kernel run directory (``tempfile.mkdtemp(prefix=...)``).
RUN_DIR_PREFIX = "themisto-kernel-"
#: The owner record in a run directory.
OWNER_FILE = "owner.json"
#: A run directory without an owner record is left alone while younger than this (it is being made).
UNOWNED_GRACE_S = 60.0

# Container labels (set by the docker backend; read here to find a dead owner's containers).
LABEL_KERNEL = "themisto-env.kernel"
LABEL_HOST = "themisto-env.host"
LABEL_HOST_PID = "themisto-env.host-pid"
LABEL_HOST_PID_START = "themisto-env.host-pid-start"
LABEL_CREATED = "themisto-env.created"


# -- processes -------------------------------------------------------------------------------------------


def process_start(pid: int) -> str | None:
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its closing paren.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) <= 19 or fields[0] == b"Z":  # a zombie has exited: nothing left to kill
        return None
    return fields[19].decode()


def boot_id() -> str:
    """This boot's id (start times count from boot: after a reboot every recorded owner is dead)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def identity(pid: int | None = None) -> dict[str, Any]:
    """Who a process is, in a form that survives pid reuse: host, boot, pid and the pid's start time."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": boot_id(), "pid": pid, "start": process_start(pid)}


def process_record(pid: int) -> dict[str, Any]:
    """A host process to kill if its owner dies: pid and start time."""
    return {"pid": pid, "start": process_start(pid)}


def kill_process(record: dict[str, Any]) -> bool:
    """SIGKILL a recorded process (its process group when it leads one) if it is still the same process.

    Returns:
        Whether a signal was sent.
    """
    try:
        pid = int(record["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    start = process_start(pid)
    if start is None or start != record.get("start"):
        return False  # gone, or the pid now belongs to another process
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# -- owner records -----------------------------------------------------------------------------------------


def write_owner(
    run_dir: Path,
    backend: str,
    *,
    processes: Iterable[dict[str, Any]] = (),
    containers: Iterable[str] = (),
) -> None:
    """Write (or rewrite, after a restart) a run directory's ``owner.json``, atomically."""
    record = {
        "version": 1,
        "owner": identity(),
        "backend": backend,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "processes": list(processes),
        "containers": list(containers),
    }
    partial = run_dir / f".{OWNER_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(record))
    os.replace(partial, run_dir / OWNER_FILE)


def read_owner(run_dir: Path) -> dict[str, Any] | None:
    """A run directory's owner record, or None if it has none (or an unreadable one)."""
    try:
        record = json.loads((run_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("owner"), dict) else None


def owner_state(owner: dict[str, Any]) -> str:
    """``alive``, ``dead``, or ``foreign`` (another host's process: it cannot be checked from here)."""
    if owner.get("host") != socket.gethostname():
        return "foreign"
    if owner.get("boot") and owner.get("boot") != boot_id():
        return "dead"
    try:
        pid = int(owner["pid"])
    except (KeyError, TypeError, ValueError):
        return "dead"
    start = process_start(pid)
    return "alive" if start is not None and start == owner.get("start") else "dead"


def same_owner(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two identities name the same process."""
    return all(a.get(key) == b.get(key) for key in ("host", "boot", "pid", "start"))


# -- leftovers -------------------------------------------------------------------------------------------


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
    """Where run directories are made: the temporary directory (``TMPDIR``) and ``/tmp``."""
    roots = [Path(tempfile.gettempdir()), Path("/tmp")]
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
    dead owner use the docker backend's ``remove_stale_containers``."""
    lines: list[str] = []
    for leftover in leftovers(roots):
        lines += remove(leftover, dry_run=dry_run, containers=containers)
    return lines


# -- in the owner: atexit and the reaper ---------------------------------------------------------------------

_kernels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # kernel -> owner pid
_atexit_registered = False
_reapers: dict[tuple[int, str], int] = {}  # (owner pid, root) -> reaper pid
_lock = threading.Lock()  # kernels start and close on several threads (a pool's, a discard's)


def track(kernel: Any, run_dir: Path) -> None:
    """Called by a kernel as it starts: close it at interpreter exit, and have a reaper watch its owner.

    At this process's first start in a temporary root, what dead owners left in that root is removed,
    and a reaper for (this process, root) is started.
    """
    global _atexit_registered
    pid = os.getpid()
    with _lock:
        _kernels[kernel] = pid
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True
        root = str(run_dir.parent)
        if (pid, root) in _reapers:
            return
        with contextlib.suppress(Exception):  # containers: at the docker backend's first start
            collect([Path(root)], containers=False)
        with contextlib.suppress(OSError):  # no reaper: the atexit hook and gc still hold (tried again next start)
            _reapers[(pid, root)] = start_reaper(root)


def untrack(kernel: Any) -> None:
    """Called by a kernel as it closes."""
    with _lock:
        _kernels.pop(kernel, None)


def _close_all() -> None:
    """atexit: close the kernels this process started (never a parent's, after a fork)."""
    pid = os.getpid()
    with _lock:
        kernels = list(_kernels.items())
    for kernel, owner in kernels:
        if owner == pid:
            with contextlib.suppress(Exception):
                kernel.close()


def reaper_command(root: str, owner: dict[str, Any] | None = None) -> list[str]:
    """The reaper's command line: this file run by path (the package is not imported)."""
    owner = owner or identity()
    boot = f"import runpy; runpy.run_path({__file__!r}, run_name='__main__')"
    identity_args = ["--pid", str(owner["pid"]), "--start", str(owner["start"])]
    return [sys.executable, "-P", "-c", boot, *identity_args, "--root", root]


def start_reaper(root: str) -> int:
    """Start the reaper of this process for one temporary root (own session, stdio on /dev/null); return
    its pid. (``posix_spawn``, not ``Popen``: nothing in this process waits for it, nor warns that it
    still runs at exit.)"""
    devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    command = reaper_command(root)
    return os.posix_spawn(command[0], command, dict(os.environ), file_actions=devnull, setsid=True)


def reaper_pids() -> list[int]:
    """Pids of the reapers this process started (for tests and diagnostics)."""
    return [reaper for (pid, _), reaper in _reapers.items() if pid == os.getpid()]


# -- the reaper process ------------------------------------------------------------------------------------


def wait_for_exit(pid: int, start: str) -> None:
    """Return once the process (pid, start) has exited."""
    fd = None
    with contextlib.suppress(OSError, AttributeError):
        fd = os.pidfd_open(pid)
    try:
        if process_start(pid) != start:  # already gone (checked after opening: no race with reuse)
            return
        if fd is not None:
            select.select([fd], [], [])
            return
        while process_start(pid) == start:
            time.sleep(1.0)
    finally:
        if fd is not None:
            os.close(fd)


def reap(owner: dict[str, Any], roots: Iterable[Path]) -> list[str]:
    """Remove what a dead owner left under the roots, and its labelled containers."""
    roots = list(roots)
    found = leftovers(roots, owner=owner)
    lines: list[str] = []
    docker_used = False
    for leftover in found:
        docker_used |= bool(leftover.containers) or (leftover.record or {}).get("backend") == "docker"
        lines += remove(leftover)
    if docker_used:  # containers started before their id reached owner.json
        with contextlib.suppress(Exception):
            for name in remove_containers(owner_containers(owner)):
                lines.append(f"removed container {name} (owner pid {owner['pid']} dead)")
    return lines


def main(argv: list[str] | None = None) -> None:
    """The reaper: wait for the owner to die, then remove what it left."""
    parser = argparse.ArgumentParser(description="Remove a dead owner's kernels, containers and run dirs.")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--root", action="append", default=[])
    args = parser.parse_args(argv)
    os.chdir("/")  # hold no directory
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the owner is not for us
    owner = {"host": socket.gethostname(), "boot": boot_id(), "pid": args.pid, "start": args.start}
    wait_for_exit(args.pid, args.start)
    reap(owner, [Path(root) for root in args.root])


if __name__ == "__main__":
    main()
