"""A bwrap copy's own namespaces, on the host side: whether this host lets a copy make them inside its
template's sandbox (`nested_namespaces_refused`), and the copy's limit hits, read from ``/proc`` by its pid
namespace (`namespace_limit_events`). The copy makes them itself, right after the fork
(``_isolate_copy`` in `themisto_env.sandbox.template.zygote`); a docker copy takes a uid instead
(`themisto_env.sandbox.kernel.copy_uid`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from themisto_env.sandbox.kernel.copy_uid import limit_events

__all__ = ["COPY_KERNEL_PID", "namespace_limit_events", "namespace_pid", "nested_namespaces_refused"]


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
    return limit_events(count, nproc, kernel)


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
