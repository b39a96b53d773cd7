"""Who owns a kernel: process identities that survive pid reuse, and the run directory's owner record.

A kernel's *owner* is the host process that started it. Every run directory holds ``owner.json``
(`write_owner`): who owns it (host, boot, pid and the pid's start time, so a reused pid is never
taken for the owner), the backend, the kernel's host processes (pid and start time) and containers.
`owner_state` tells a live owner from a dead one.

Standard library only: the reaper loads it without running the package's ``__init__`` (see
`themisto_env.sandbox.lifetime.reaper.reaper_command`).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Prefix of every kernel run directory (``tempfile.mkdtemp(prefix=...)``).
RUN_DIR_PREFIX = "themisto-kernel-"
#: The owner record in a run directory.
OWNER_FILE = "owner.json"
#: Where a short folder for run directories is made when ``TMPDIR`` is too deep for kernel sockets, in order
#: (`BASE/themisto-UID`: see `themisto_env.sandbox.lifetime.run_root`).
SHORT_ROOTS = (Path("/tmp"), Path("/dev/shm"))


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
