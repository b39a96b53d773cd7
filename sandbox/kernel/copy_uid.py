"""A docker copy's uid identity, on the host side: its uid, the folders only it can write, its limits.

Copies forked inside one container share its kernel, its cgroup and its image; what keeps them apart is
that each takes a uid of its own right after the fork, before any model code runs
(``_take_identity`` in `themisto_env.sandbox.template.zygote`). The host picks the uid (a random slot of
`UID_SLOTS`, never used twice by this process) and gives the copy's folders to it beforehand, so the
template needs no ``CAP_CHOWN``:

- the run directory stays the host's, sticky, writable by the copy's group only (its IPC sockets go there;
  the owner record, which the reaper trusts, cannot be replaced);
- the working folder, the snapshot boxes and ``tmp`` (its ``TMPDIR`` and ``HOME``) become the copy's own,
  mode 0700.

From the host, the copy's limit hits are read from the kernel's own records (never from what the copy
prints): its processes and threads, counted by uid in ``/proc`` (``RLIMIT_NPROC`` refused a fork once the
count reached it), and its data size against its ``RLIMIT_DATA`` (a ``MemoryError`` at the limit).
A ``bwrap`` copy takes no uid but namespaces of its own (`themisto_env.sandbox.kernel.copy_namespaces`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from themisto_env.errors import KernelStartError
from themisto_env.sandbox.models import SandboxLimits

__all__ = [
    "UID_BASE",
    "UID_SLOTS",
    "CopyIdentity",
    "can_give_identities",
    "data_near_limit",
    "limit_events",
    "new_identity",
]

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
            # a copy that ran here before (a restart) may have put a link in a folder's place: never follow one
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                raise KernelStartError(f"a copy's folder {folder} is not a plain folder (a link left by a copy?)")
            os.chown(folder, self.uid, self.uid, follow_symlinks=False)
            os.chmod(folder, 0o700)

    def processes(self) -> list[int]:
        """The pids (as this host sees them) of the processes of this uid."""
        found = []
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    with contextlib.suppress(OSError):
                        if entry.stat().st_uid == self.uid:
                            found.append(int(entry.name))
        return found

    def end_processes(self, rounds: int = 20) -> bool:
        """SIGKILL every process of this uid, in rounds (what forked meanwhile is found by the next), from the
        host: whether none is left."""
        for _ in range(rounds):
            pids = self.processes()
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(OSError):
                    fd = os.pidfd_open(pid)
                    try:
                        if os.stat(f"/proc/{pid}").st_uid == self.uid:  # checked on the pidfd's process
                            signal.pidfd_send_signal(fd, signal.SIGKILL)
                    finally:
                        os.close(fd)
            time.sleep(0.01)
        return not self.processes()

    def tasks(self) -> int:
        """How many processes and threads of this uid run (seen in ``/proc``: the container shares the
        host's kernel)."""
        count = 0
        for pid in self.processes():
            with contextlib.suppress(OSError):  # gone meanwhile
                count += len(os.listdir(f"/proc/{pid}/task"))
        return count

    def limit_events(self, pid: int | None) -> dict[str, int]:
        """The copy's limit hits now, read from ``/proc``: ``pids_max`` (as a container's cgroup names it) when
        its uid's tasks are at ``RLIMIT_NPROC``; ``data_limit`` when its kernel's data size is near its
        ``RLIMIT_DATA``. The second is an inference (a large but legal allocation comes near too): it names
        the failure of code that failed, never fails code that ran (see the disposable kernels' watch)."""
        return limit_events(self.tasks(), self.nproc, pid)


def limit_events(tasks: int, nproc: int, kernel: int | None) -> dict[str, int]:
    """A copy's limit hits from what the host read: ``pids_max`` when its ``tasks`` are within `TASK_MARGIN`
    of its ``RLIMIT_NPROC`` (``nproc``), ``data_limit`` when its ``kernel``'s data size is near its
    ``RLIMIT_DATA``."""
    events: dict[str, int] = {}
    if tasks >= nproc - TASK_MARGIN:
        events["pids_max"] = 1
    if kernel is not None and data_near_limit(kernel):
        events["data_limit"] = 1
    return events


def data_near_limit(pid: int) -> bool:
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
