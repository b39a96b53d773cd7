"""A forked copy's own identity, on the host side: its uid, the folders only it can write, its limits.

Copies forked inside one container share its kernel, its cgroup and its image; what keeps them apart is
that each takes a uid of its own right after the fork, before any model code runs
(``_take_identity`` in :mod:`themisto_env.sandbox.zygote`). The host picks the uid (a random slot of
:data:`UID_SLOTS`, never used twice by this process) and gives the copy's folders to it beforehand, so the
template needs no ``CAP_CHOWN``:

- the run directory stays the host's, sticky, writable by the copy's group only (its IPC sockets go there;
  the owner record, which the reaper trusts, cannot be replaced);
- the working folder, the snapshot boxes and ``tmp`` (its ``TMPDIR`` and ``HOME``) become the copy's own,
  mode 0700.

From the host, the copy's limit hits are read from the kernel's own records (never from what the copy
prints): its processes and threads, counted by uid in ``/proc`` (``RLIMIT_NPROC`` refused a fork once the
count reached it), and its data size against its ``RLIMIT_DATA`` (a ``MemoryError`` at the limit).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from themisto_env.sandbox.models import SandboxLimits

__all__ = ["UID_BASE", "UID_SLOTS", "CopyIdentity", "can_give_identities", "new_identity"]

#: The first uid a copy may get, far above the host's users and the image's (uid 1000).
UID_BASE = 1_000_000
#: How many uids copies draw from (at random: two processes on one host rarely meet).
UID_SLOTS = 1 << 24
#: A memory hit is seen when the data size is within this of the copy's ``RLIMIT_DATA``.
MEMORY_MARGIN = 64 << 20
#: A process hit is seen when the uid's tasks are within this of its ``RLIMIT_NPROC``.
TASK_MARGIN = 2

_USED: set[int] = set()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CopyIdentity:
    """Who a forked copy becomes: its uid and gid (equal), its limits, its private temporary folder."""

    uid: int
    nproc: int
    memory_bytes: int
    tmp: Path

    def request(self) -> dict[str, object]:
        """The ``identity`` of the template's ``fork`` request."""
        return {
            "uid": self.uid,
            "gid": self.uid,
            "nproc": self.nproc,
            "memory_bytes": self.memory_bytes,
            "tmp": str(self.tmp),
        }

    def give_folders(self, run_dir: Path, workdir: Path, boxes: tuple[Path, ...]) -> None:
        """Give the copy its folders (see the module's docstring); the rest of its run directory stays the
        host's and hidden from other copies."""
        os.chown(run_dir, 0, self.uid)
        os.chmod(run_dir, 0o1770)
        self.tmp.mkdir(exist_ok=True)
        for folder in (workdir, *boxes, self.tmp):
            os.chown(folder, self.uid, self.uid)
            os.chmod(folder, 0o700)

    def tasks(self) -> int:
        """How many processes and threads of this uid run (seen in ``/proc``: the container shares the
        host's kernel)."""
        count = 0
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                with contextlib.suppress(OSError, ValueError):
                    if entry.stat().st_uid == self.uid:
                        count += len(os.listdir(f"/proc/{entry.name}/task"))
        return count

    def limit_events(self, pid: int | None) -> dict[str, int]:
        """The copy's limit hits now (``pids_max``, ``oom_kill`` as a container's cgroup would name them),
        from ``/proc``: its uid's tasks at ``RLIMIT_NPROC``; its kernel's data size at its ``RLIMIT_DATA``."""
        events: dict[str, int] = {}
        if self.tasks() >= self.nproc - TASK_MARGIN:
            events["pids_max"] = 1
        if pid is not None and _data_near_limit(pid):
            events["oom_kill"] = 1
        return events


def _data_near_limit(pid: int) -> bool:
    """Whether a process's data size reached its ``RLIMIT_DATA`` (an allocation failed there)."""
    try:
        limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    limit = next((line.split()[3] for line in limits if line.startswith("Max data size")), "unlimited")
    data = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:")), 0)
    return limit.isdigit() and data >= int(limit) - MEMORY_MARGIN


def can_give_identities() -> str | None:
    """None where the host can give copies uids of their own (it can change a file's owner: root); else
    why not."""
    if os.geteuid() != 0:
        return "the host cannot give each copy a uid of its own (changing a folder's owner needs root)"
    return None


def new_identity(limits: SandboxLimits, run_dir: Path) -> CopyIdentity:
    """A new copy's identity: a uid this process never gave before, the limits of one kernel."""
    with _LOCK:
        while True:
            uid = UID_BASE + secrets.randbelow(UID_SLOTS)
            if uid not in _USED:
                _USED.add(uid)
                break
    return CopyIdentity(uid=uid, nproc=limits.pids, memory_bytes=limits.memory_mb << 20, tmp=run_dir / "tmp")
