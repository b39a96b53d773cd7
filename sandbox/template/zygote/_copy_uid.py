"""A forked copy's uid identity (docker's isolated copies): it takes a uid, limits and folders of its own, and
what it left is reaped by its uid; and every copy dies with its template. bwrap's copies take namespaces
instead (`_copy_namespaces`).

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from typing import Any


def _die_with(parent: int) -> None:
    """End this forked child when ``parent`` (its template, one thread) ends: SIGKILL on the parent's death
    (``PR_SET_PDEATHSIG``), and at once if it is already gone (the child then has another parent)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _take_identity(identity: dict[str, Any] | None, parent: int) -> None:
    """In a forked copy, before anything else runs in it: take the copy's own identity (None: keep the
    template's, as on ``local`` and ``bwrap``). ``identity``: ``uid`` and ``gid`` (a slot the host chose and
    gave the copy's folders to), ``nproc`` (its processes and threads: ``RLIMIT_NPROC`` counts per uid, so it
    bounds this copy only), ``memory_bytes`` (what it may allocate beyond its size at its first
    cell, see `_settle_memory`: ``RLIMIT_DATA``, and ``RLIMIT_AS`` as a backstop), ``tmp`` (its ``TMPDIR``
    and ``HOME``).

    The OOM killer takes a copy before its template (``oom_score_adj`` 1000); then the supplementary groups
    go, the gid and the uid change (real, effective and saved: every capability goes with them, for good),
    and files it makes are its own only (umask 077). The parent-death signal, which a change of uid clears,
    is armed again. Any failure ends the copy before model code could run."""
    if identity is None:
        return
    import ctypes

    uid, gid = int(identity["uid"]), int(identity["gid"])
    if uid <= 0 or gid <= 0:
        raise ValueError(f"a copy's identity must not be root: {uid}:{gid}")
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    # until its first cell, twice the allowance (its kernel's start, a state it restores); then settled
    _set_limits(int(identity["nproc"]), 2 * int(identity["memory_bytes"]))
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise PermissionError("the copy kept its template's identity")
    ctypes.CDLL(None).prctl(4, 1)  # PR_SET_DUMPABLE: its /proc files are its own again (the uid change: root's)
    _die_with(parent)  # PR_SET_PDEATHSIG again: the change of uid cleared it
    os.umask(0o077)
    _use_tmp(identity["tmp"])


def _set_limits(nproc: int, memory: int) -> None:
    """This process's rlimits, soft and hard (it cannot raise them again): ``RLIMIT_NPROC`` at ``nproc``,
    ``RLIMIT_DATA`` and ``RLIMIT_AS`` at its size now plus ``memory`` (``RLIMIT_AS``: plus `AS_SLACK`)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    sizes = _vm_sizes()
    for limit, size in (
        (resource.RLIMIT_DATA, sizes.get("VmData", 0) + memory),
        (resource.RLIMIT_AS, sizes.get("VmSize", 0) + memory + AS_SLACK),
    ):
        resource.setrlimit(limit, (size, size))


def _use_tmp(folder: str) -> None:
    """``folder`` as this process's ``TMPDIR`` and ``HOME``, and ``tempfile``'s."""
    os.environ.update({"TMPDIR": folder, "HOME": folder})
    import tempfile

    tempfile.tempdir = None  # chosen again from $TMPDIR


#: Address space a copy may map beyond its template's size and its memory allowance (thread stacks and
#: malloc arenas reserve address space they never fill); what it fills is bounded by ``RLIMIT_DATA``.
AS_SLACK = 1 << 30


def _settle_memory(shell: Any, memory: int) -> None:
    """At a copy's first cell, before its code runs: its memory allowance counts from its size now (its kernel
    started: thread stacks, sockets, heap; its state restored), not from its
    size at the fork, when its limits were twice the allowance (`_take_identity`). ``RLIMIT_DATA`` and
    ``RLIMIT_AS`` (soft and hard: the copy cannot raise them again) become its size now plus ``memory``
    (``RLIMIT_AS``: plus `AS_SLACK`), never above what they were."""
    import resource

    def first_cell(*_: Any) -> None:
        shell.events.unregister("pre_run_cell", first_cell)
        sizes = _vm_sizes()
        for limit, size in (
            (resource.RLIMIT_DATA, sizes["VmData"] + memory),
            (resource.RLIMIT_AS, sizes["VmSize"] + memory + AS_SLACK),
        ):
            size = min(size, resource.getrlimit(limit)[1])
            resource.setrlimit(limit, (size, size))

    shell.events.register("pre_run_cell", first_cell)


def _vm_sizes() -> dict[str, int]:
    """This process's ``VmSize`` and ``VmData`` in bytes (``/proc/self/status``)."""
    sizes: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmSize", "VmData"):
                sizes[key] = int(value.split()[0]) * 1024
    return sizes


def _reap_identity(request: dict[str, Any]) -> dict[str, Any]:
    """End everything a copy left (``reap``: its uid's processes, daemons included, and its files in the
    shared ``/tmp`` and ``/dev/shm``), from a child that takes the copy's uid for it: ``kill(-1)`` then
    reaches that uid's processes only, and the template keeps no capability to signal others."""
    uid = int(request["uid"])
    if uid <= 0:
        return {"error": "not a copy's uid"}
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(100):  # what forked between two passes is found by the next
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
            import shutil

            for folder in ("/tmp", "/dev/shm"):
                with contextlib.suppress(OSError):
                    for entry in os.scandir(folder):
                        with contextlib.suppress(OSError):
                            if entry.stat(follow_symlinks=False).st_uid != uid:
                                continue
                            if entry.is_dir(follow_symlinks=False):
                                shutil.rmtree(entry.path, ignore_errors=True)
                            else:
                                os.unlink(entry.path)
            code = 0
        finally:
            os._exit(code)
    # a bounded wait: the copy's own processes may signal (stop) this child once it has their uid, and the
    # template's loop must never hang on it; what it did not end, the host ends (it sees the uid's processes)
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(REAP_WAIT_S * 1000):
            return {"ok": False, "error": f"the reap did not end within {REAP_WAIT_S:g} s"}
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return {"ok": os.waitstatus_to_exitcode(status) == 0}


#: How long the template waits for a reap child (``reap``) before it answers anyway.
REAP_WAIT_S = 5.0
