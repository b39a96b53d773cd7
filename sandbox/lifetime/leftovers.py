"""What dead owners left: run directories, kernel processes and containers, found and removed.

A run directory whose owner (see `themisto_env.sandbox.lifetime.owners`) is dead is a *leftover*; with it go
the kernel processes it records (if their start time still matches) and its containers. ``themisto
sandbox gc``, the reaper and a process's first kernel start remove them (`collect`,
`remove`). Run directories of owners on other hosts (a ``/tmp`` shared with a container) are never
touched; directories without an owner record (older versions) only when they are older than
`UNOWNED_GRACE_S` and no process works in them.

A directory is removed only once nothing can write into it any more (`remove_run_dir`): the processes
it records (a template's own record and those of the kernels forked into it) and every process working in
it are killed, and their ends awaited (pidfds), before it goes; what wrote into it meanwhile is ended and
removed in another round. No step waits for a fixed time: a guard (`END_GUARD_S`) only bounds a wait
for processes the kernel keeps from dying.

Standard library only (the docker SDK is imported when a container must go) and `owners`: the reaper loads it without
running the package's ``__init__`` (see `themisto_env.sandbox.lifetime.reaper.reaper_command`).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto_env.sandbox.lifetime.owners import (
    OWNER_FILE,
    RUN_DIR_PREFIX,
    SHORT_ROOTS,
    owner_state,
    process_start,
    read_owner,
    same_owner,
)

#: A run directory without an owner record is left alone while younger than this (it is being made).
UNOWNED_GRACE_S = 60.0
#: A guard, not a timing: how long the removal of a directory waits for the processes it killed to end (a
#: SIGKILLed process ends as soon as it is scheduled, unless the kernel holds it in an uninterruptible wait).
END_GUARD_S = 60.0
#: How many times a directory is emptied again when a process wrote into it while it was being removed.
REMOVE_ROUNDS = 5

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
    used when ``TMPDIR`` is too deep for kernel sockets (`themisto_env.sandbox.lifetime.run_root`)."""
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


def working_in(run_dir: Path) -> list[int]:
    """Pids of the processes working in (or below) the directory, this one excepted. Processes whose
    working directory cannot be read (another user's) are skipped: their directories in a sticky ``/tmp``
    are not ours to remove."""
    prefix = str(run_dir.resolve())
    me = str(os.getpid())
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or entry.name == me:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + "/"):
            found.append(int(entry.name))
    return found


def _in_use(run_dir: Path) -> bool:
    """Whether any process works in (or below) the directory."""
    return bool(working_in(run_dir))


def recorded_processes(run_dir: Path) -> list[dict[str, Any]]:
    """The processes a run directory records: its owner record's and those of the run directories inside it
    (the kernels forked into a template's ``kernels/``). A nested record counts only when this user wrote it
    for the same owner (a kernel cannot plant one naming a process it does not own)."""
    top = read_owner(run_dir)
    if top is None:
        return []
    found = [p for p in top.get("processes", []) if isinstance(p, dict)]
    with contextlib.suppress(OSError):
        for path in sorted(run_dir.glob(f"*/*/{OWNER_FILE}")):
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            record = read_owner(path.parent)
            if record is not None and same_owner(record["owner"], top["owner"]):
                found += [p for p in record.get("processes", []) if isinstance(p, dict)]
    return found


def _open(pid: int, start: str | None) -> tuple[bool, int | None]:
    """Whether (pid, start) still runs, and a pidfd of it (None where pidfds are not supported). The pidfd
    is opened before the start time is checked: it then cannot name a process that reused the pid."""
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False, None
    except (OSError, AttributeError):
        fd = None
    if start is None or process_start(pid) != start:
        if fd is not None:
            os.close(fd)
        return False, None
    return True, fd


def end_processes(
    records: Iterable[dict[str, Any]], pids: Iterable[int] = (), *, deadline: float | None = None
) -> list[int]:
    """SIGKILL recorded processes (pid and start time: only if still the same process) and running pids, each
    with its process group when it leads one, and return once every one signalled has ended.

    Waits on pidfds (no polling), bounded only by a guard: ``deadline`` (``time.monotonic``), else
    `END_GUARD_S` from now.

    Returns:
        The pids signalled.
    """
    targets: dict[int, str | None] = {}
    for record in records:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            targets.setdefault(int(record["pid"]), record.get("start"))
    for pid in pids:
        targets.setdefault(pid, process_start(pid))
    signalled: list[int] = []
    fds: list[int] = []
    polled: list[tuple[int, str | None]] = []
    try:
        for pid, start in targets.items():
            if pid <= 1 or pid == os.getpid():
                continue
            running, fd = _open(pid, start)
            if not running:
                continue
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                if fd is not None:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                if fd is not None:
                    os.close(fd)
                continue
            signalled.append(pid)
            if fd is not None:
                fds.append(fd)
            else:
                polled.append((pid, start))
        if deadline is None:
            deadline = time.monotonic() + END_GUARD_S
        poller = select.poll()  # not select(): an owner's descriptors may number over 1024
        for fd in fds:
            poller.register(fd, select.POLLIN)
        waiting = set(fds)
        while waiting and time.monotonic() < deadline:  # a pidfd reads as ready once its process ended
            for fd, _ in poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                waiting.discard(fd)
                poller.unregister(fd)
        while polled and time.monotonic() < deadline:  # no pidfds (Linux before 5.3): the start time
            polled = [(pid, start) for pid, start in polled if process_start(pid) == start]
            if polled:
                time.sleep(0.01)
    finally:
        for fd in fds:
            os.close(fd)
    return signalled


def remove_run_dir(run_dir: Path, records: Iterable[dict[str, Any]] = ()) -> list[int]:
    """Remove a run directory once nothing can write into it any more; return the pids killed on the way.

    The processes it records (with ``records``, known from before: a partly removed directory may have lost
    its own) and every process working in it are killed and their ends awaited, then it is removed; if
    something wrote into it meanwhile (a kernel forked as its template died), the next round ends that too,
    up to `REMOVE_ROUNDS`. Nothing here waits for a fixed time.
    """
    records = list(records)
    killed: list[int] = []
    deadline = time.monotonic() + END_GUARD_S  # one guard for all rounds
    for _ in range(REMOVE_ROUNDS):
        if not os.path.lexists(run_dir):
            break
        records += recorded_processes(run_dir)
        ended = end_processes(records, working_in(run_dir), deadline=deadline)
        killed += [pid for pid in ended if pid not in killed]
        shutil.rmtree(run_dir, ignore_errors=True)
    return killed


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
            for p in recorded_processes(run_dir)
            if p.get("start") and str(p.get("pid", "")).isdigit() and process_start(int(p["pid"])) == p["start"]
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
        for c in client.containers.list(all=True, filters={"label": labels}, ignore_removed=True)
        if (c.labels or {}).get(LABEL_HOST) == owner.get("host")
        and (c.labels or {}).get(LABEL_HOST_PID_START) in (owner.get("start"), None)
    ]


def discard_run_dir(run_dir: Path) -> None:
    """Remove a run directory its owner is done with (a kernel it closed): at once where nothing writes into
    it any more, the usual case (no process scan); else as `remove_run_dir` does (a cell's worker
    still writing as its group dies)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    if os.path.lexists(run_dir):
        remove_run_dir(run_dir)


def remove(leftover: Leftover, *, dry_run: bool = False, containers: bool = True) -> list[str]:
    """Remove what a leftover holds: kill its processes (those it records, the kernels forked into it
    included, and those working in it) and await their ends, remove its containers, then its directory
    (`remove_run_dir`).

    Args:
        containers: Remove the containers it names (else leave them to the label-based cleanup).

    Returns:
        One line per item (``killed ...``, ``removed ...``; ``would ...`` with ``dry_run``). If its
        containers cannot be removed (no engine) a ``warning:`` line says so, and the directory still goes.
    """
    verb = "would remove" if dry_run else "removed"
    lines: list[str] = []
    if dry_run:
        lines += [f"would kill kernel process {process['pid']} ({leftover.owner})" for process in leftover.processes]
    else:
        killed = end_processes(leftover.processes, working_in(leftover.run_dir))
        lines += [f"killed kernel process {pid} ({leftover.owner})" for pid in killed]
    if containers and leftover.containers:
        try:
            for name in remove_containers(leftover.containers, dry_run=dry_run):
                lines.append(f"{verb} container {name} ({leftover.owner})")
        except Exception as exc:  # no engine: the labelled container goes at the next gc with one
            ids = ", ".join(c[:12] for c in leftover.containers)
            lines.append(f"warning: could not remove containers {ids}: {' '.join(str(exc).split())[:200]}")
    if not dry_run:  # what started meanwhile (a kernel forked as its template died) goes before the folder
        again = remove_run_dir(leftover.run_dir, leftover.processes)
        lines += [f"killed kernel process {pid} ({leftover.owner})" for pid in again if pid not in killed]
    lines.append(f"{verb} run dir {leftover.run_dir} ({leftover.owner})")
    return lines


def collect(roots: Iterable[Path] | None = None, *, dry_run: bool = False, containers: bool = True) -> list[str]:
    """Remove every leftover of dead owners under the roots (see `remove`); return its lines.

    Containers are removed by the ids recorded in run directories; for every labelled container of a
    dead owner use `themisto_env.sandbox.backends.containers.remove_stale_containers`."""
    lines: list[str] = []
    for leftover in leftovers(roots):
        lines += remove(leftover, dry_run=dry_run, containers=containers)
    return lines
