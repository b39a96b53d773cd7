"""A forked copy's own identity, on the host side: its uid, the folders only it can write, its limits.

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
A ``bwrap`` copy takes no uid (namespaces of its own instead, ``_isolate_copy``): its hits are read the same
way, its processes counted by its pid namespace (`namespace_limit_events`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from themisto_env.errors import KernelStartError
from themisto_env.sandbox.models import SandboxLimits

__all__ = [
    "COPY_KERNEL_PID",
    "UID_BASE",
    "UID_SLOTS",
    "CopyIdentity",
    "can_give_identities",
    "namespace_limit_events",
    "namespace_pid",
    "nested_namespaces_refused",
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
        return _limit_events(self.tasks(), self.nproc, pid)


def _limit_events(tasks: int, nproc: int, kernel: int | None) -> dict[str, int]:
    """A copy's limit hits from what the host read: ``pids_max`` when its ``tasks`` are within `TASK_MARGIN`
    of its ``RLIMIT_NPROC`` (``nproc``), ``data_limit`` when its ``kernel``'s data size is near its
    ``RLIMIT_DATA``."""
    events: dict[str, int] = {}
    if tasks >= nproc - TASK_MARGIN:
        events["pids_max"] = 1
    if kernel is not None and _data_near_limit(kernel):
        events["data_limit"] = 1
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


def namespace_limit_events(keeper: int, nproc: int) -> dict[str, int]:
    """A ``bwrap`` copy's limit hits now, read from ``/proc`` as `CopyIdentity.limit_events` reads a docker
    copy's: ``pids_max`` when the processes and threads of the copy's own pid namespace (its keeper's
    children's: ``RLIMIT_NPROC`` counts per user namespace, so exactly those) are within `TASK_MARGIN` of
    ``nproc``; ``data_limit`` when its kernel's (`COPY_KERNEL_PID` there) data size is near its ``RLIMIT_DATA``.
    ``keeper``: the copy's keeper (the process its template forked, outside the copy's pid namespace), as this
    process sees it. Empty once the keeper is gone."""
    try:
        namespace = os.readlink(f"/proc/{keeper}/ns/pid_for_children")
        if namespace == os.readlink(f"/proc/{keeper}/ns/pid"):  # not isolated (yet): not a copy's namespace
            return {}
    except OSError:
        return {}
    count, kernel = 0, None
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
                    if os.readlink(f"/proc/{entry.name}/ns/pid") == namespace:
                        count += len(os.listdir(f"/proc/{entry.name}/task"))
                        if kernel is None and namespace_pid(int(entry.name)) == COPY_KERNEL_PID:
                            kernel = int(entry.name)
    return _limit_events(count, nproc, kernel)


#: A ``bwrap`` copy's kernel's pid in its own namespace: the first process its init (pid 1) forks.
COPY_KERNEL_PID = 2


def namespace_pid(pid: int) -> int | None:
    """A process's pid in its own (innermost) pid namespace (``NSpid`` in ``/proc``), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


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


#: What a bwrap copy does first (``_isolate_copy``), tried once in a sandbox like a template's: namespaces of
#: its own, its uid mapped, a child in the new pid namespace mounting its own ``/proc`` and ``/tmp``.
_NESTING_PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000 | 0x20000000 | 0x00020000 | 0x40000000 | 0x08000000):
    raise SystemExit("unshare: " + os.strerror(ctypes.get_errno()))
for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
    with open("/proc/self/" + name, "w") as f:
        f.write(text)
pid = os.fork()
if pid == 0:
    code = 0
    for target, kind in ((b"/proc", b"proc"), (b"/tmp", b"tmpfs")):
        if libc.mount(kind, target, kind, 0, None):
            os.write(2, (f"mount {kind.decode()}: " + os.strerror(ctypes.get_errno())).encode())
            code = 1
    os._exit(code if os.getpid() == 1 else 2)
raise SystemExit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@functools.cache
def nested_namespaces_refused() -> str | None:
    """Why this host cannot give ``bwrap`` copies namespaces of their own inside their template's sandbox
    (user namespaces disabled, or nested ones refused: measured once per process, in a sandbox like a
    template's), or None where it can. None as root or without bwrap too: a bwrap template then fails to
    start with the backend's own reason."""
    if os.geteuid() == 0 or (bwrap := shutil.which("bwrap")) is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        allowed = int(Path("/proc/sys/user/max_user_namespaces").read_text())
        if allowed < 2:
            return f"this host allows {allowed} user namespace(s) (/proc/sys/user/max_user_namespaces): none to nest"
    command = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL", "--die-with-parent"]
    command += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", sys.executable, "-c", _NESTING_PROBE]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe of nested user namespaces failed: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:200]
        return f"this host refuses user namespaces nested in a bwrap sandbox ({last})"
    return None
