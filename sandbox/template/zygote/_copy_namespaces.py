"""A forked copy's own namespaces (bwrap's isolated copies of model-written code): user, pid, mount, network
and IPC namespaces, its folders, its limits and no capability, taken before any model code runs. docker's
copies take a uid instead (`_copy_uid`).

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
from typing import Any

from themisto_env.sandbox.template.zygote._copy_uid import _die_with, _set_limits, _use_tmp

#: The template's environment variable that makes its kernels isolate themselves (`_isolate_copy`): set by
#: the ``bwrap`` template launcher for model-written code, a JSON object (``nproc``, ``memory_bytes``, ``hide``).
ISOLATE_VARIABLE = "THEMISTO_ISOLATE_COPIES"

# unshare(2) and mount(2) flags, <linux/sched.h> and <linux/mount.h>
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_CLONE_NEWNET, _CLONE_NEWIPC = 0x40000000, 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_DUMPABLE = 4
#: The namespaces a copy makes for itself (a network and an IPC namespace too: copies shared the sandbox's
#: loopback and System V IPC).
COPY_NAMESPACES = _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC
#: What a copy's kernel may use beyond its size at the fork before its memory allowance counts (its
#: ipykernel application starting: threads, sockets, heap).
KERNEL_START_BYTES = 256 << 20


def _isolate_copy(request: dict[str, Any]) -> None:
    """In a kernel forked by a ``bwrap`` template of model-written code (`ISOLATE_VARIABLE` set), before any
    of its own code runs: the copy takes namespaces of its own (`COPY_NAMESPACES`), nested in the sandbox's,
    as the sandbox's unprivileged user may (no capability outside them).

    The forked child stays, outside the new pid namespace, as the copy's *keeper* (the process its template
    and the host watch): it forks the copy's *init*, pid 1 of the new namespace (every process the copy starts
    goes when it ends), passes ``SIGINT`` on to it, turns ``SIGTERM`` into its end, and exits as the kernel
    did. The init forks the kernel (pid 2), passes ``SIGINT`` on, and reaps every process of the namespace,
    the orphans of daemonising code included (`_init`): the kernel reaps only its own children, as any
    process, and ``subprocess`` keeps its exit codes. The init mounts the copy's own ``/proc`` (it sees only its
    namespace's processes), ``/tmp`` (its ``TMPDIR`` and ``HOME``) and ``/dev/shm`` (empty tmpfs), and a
    read-only tmpfs over its template's run directory with only its own run directory (read-write: its work,
    its sockets) and the IPython directory (read-only) bound back: it sees no sibling's files and not the
    template's socket. These mounts are the init's, made before it drops every capability it held in the
    copy's namespaces and forks the kernel (which inherits none). Then the kernel's rlimits, for good
    (``RLIMIT_NPROC``, counted per user namespace: its own processes; ``RLIMIT_DATA``, ``RLIMIT_AS``: the
    template's limits, or the kernel's own where the fork request names them, ``limits``). A no-op where the
    variable is unset; any failure ends the copy."""

    setting = os.environ.pop(ISOLATE_VARIABLE, None)
    if not setting:
        return
    import ctypes

    config = {**json.loads(setting), **request.get("limits", {})}  # the kernel's own limits, if it asked for any
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(COPY_NAMESPACES), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    read_end, write_end = os.pipe()  # the keeper's life, which the init watches
    status_read, status_write = os.pipe()  # the kernel's wait status, from the init to the keeper
    init = os.fork()
    if init != 0:
        os.close(read_end)
        os.close(status_write)
        _keep(init, (write_end, status_read))
    os.close(write_end)
    os.close(status_read)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the init (and with it the namespace) ends with its keeper
    if select.select([read_end], [], [], 0)[0]:  # the keeper is gone already (its end of the pipe closed)
        os._exit(1)
    os.close(read_end)
    _mount_own_folders(libc, request, config)  # in the init: the kernel inherits them, and no capability
    _drop_capabilities(libc)
    # not dumpable: the kernel (same uid, no capability) can neither ptrace its init nor open its descriptors
    # in /proc (the status pipe: a forged status, or a pipe filled so the init never ends)
    _check(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    kernel = os.fork()
    if kernel != 0:
        _init(kernel, status_write)
    os.close(status_write)
    _check(libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")  # the kernel: as any process
    _die_with(1)  # the kernel ends with the init (as every process of the namespace does)
    # the kernel's rlimits: RLIMIT_NPROC counts per user namespace and uid (this copy's)
    _set_limits(int(config["nproc"]), int(config["memory_bytes"]) + KERNEL_START_BYTES)
    _check_no_capability()  # its init dropped every capability before it forked it


def _keep(init: int, kept: tuple[int, int]) -> None:
    """The keeper's life (see `_isolate_copy`): wait for the copy's init, pass signals on, exit as the kernel
    did. ``kept``: a pipe's end the init watches (open while the keeper lives), and the pipe's end the init
    writes the kernel's wait status to."""
    _, statuses = kept
    _close_all_but(*kept)  # nothing of the template's (its listener, the request's connection) stays here
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, lambda *_: os.kill(init, signal.SIGINT))
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda *_: os.kill(init, signal.SIGKILL))  # pid 1 ignores what it does not handle
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _, status = os.waitpid(init, 0)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the init is gone: nothing to pass on to
        signal.signal(number, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        reported = os.read(statuses, 16)
        if len(reported) == 4:  # the init saw the kernel end: its status, not the init's
            status = int.from_bytes(reported, "little", signed=True)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed: the keeper dies of the same signal (SIGKILL's handler cannot be set, nor needs to be)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 1)


def _init(kernel: int, statuses: int) -> None:
    """The copy's init (pid 1 of its namespace, see `_isolate_copy`): pass ``SIGINT`` on to the kernel, reap
    every child it has (the kernel, and whatever the namespace's orphans are), and once the kernel ended, write
    its wait status to ``statuses`` and end (the namespace ends with it). Every other signal it takes is the
    default's: as the namespace's init, it ignores those its namespace sends."""
    _close_all_but(statuses)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, lambda *_: os.kill(kernel, signal.SIGINT))  # first: none is dropped meanwhile
    for number in signal.valid_signals() - {signal.SIGINT}:
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(number, signal.SIG_DFL)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:  # no child left (the kernel reaped already): nothing to report
            os._exit(1)
        if pid == kernel:
            os.write(statuses, status.to_bytes(4, "little", signed=True))
            os._exit(0)


def _close_all_but(*kept: int) -> None:
    """Close every descriptor from 3 up but ``kept``."""
    low = 3
    for fd in sorted(kept):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _check(result: int, what: str) -> None:
    """Raise ``OSError`` for a failed libc call."""
    if result != 0:
        import ctypes

        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount_own_folders(libc: Any, request: dict[str, Any], config: dict[str, Any]) -> None:
    """The kernel's own ``/proc``, ``/tmp``, ``/dev/shm``, and its template's run directory hidden but for its
    own run directory and the IPython directory (see `_isolate_copy`)."""

    def mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
        encoded = [None if v is None else v.encode() for v in (source, target, kind, data)]
        _check(libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")

    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    own = os.path.dirname(os.path.abspath(request["connection_file"]))
    ipython = os.environ.get("IPYTHONDIR")
    kept = [(own, False)] + ([(ipython, True)] if ipython and os.path.isdir(ipython) else [])
    staged = []
    for index, (folder, _) in enumerate(kept):  # out of the way of the tmpfs about to cover them (/tmp's too)
        stage = f"/dev/shm/.themisto-copy-{index}"
        os.mkdir(stage)
        mount(folder, stage, None, _MS_BIND | _MS_REC)
        staged.append(stage)
    mount("tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    hidden = [os.path.abspath(folder) for folder in config.get("hide", [])]
    for folder in hidden:  # a folder under /tmp is made again in the new /tmp, then covered all the same
        os.makedirs(folder, exist_ok=True)
        mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    for (folder, readonly), stage in zip(kept, staged, strict=True):
        os.makedirs(folder, exist_ok=True)
        mount(stage, folder, None, _MS_BIND | _MS_REC)
        if readonly:
            mount(None, folder, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        _check(libc.umount2(stage.encode(), _MNT_DETACH), f"umount {stage}")
        os.rmdir(stage)
    for folder in hidden:
        mount(None, folder, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    # the sandbox's /dev (a tmpfs bwrap made, shared by the template and every copy): read-only here (its
    # device nodes stay usable: a read-only mount refuses new files, not a device's reads and writes)
    mount(None, "/dev", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _mount_flags("/dev"))
    _use_tmp("/tmp")


def _mount_flags(path: str) -> int:
    """The per-mount flags of the mount at ``path`` that a bind remount must keep (those a less privileged
    namespace cannot clear: ``nosuid``, ``nodev``, ``noexec``, the atime ones), from ``statvfs``."""
    flags = os.statvfs(path).f_flag
    kept = 0
    for statvfs_flag, mount_flag in ((2, _MS_NOSUID), (4, _MS_NODEV), (8, _MS_NOEXEC), (1024, 1024), (2048, 2048)):
        if flags & statvfs_flag:
            kept |= mount_flag
    if flags & 4096:  # ST_RELATIME
        kept |= 1 << 21  # MS_RELATIME
    return kept


def _drop_capabilities(libc: Any) -> None:
    """The end of every capability the copy's init holds in the copy's namespaces: the bounding set emptied,
    then every set (``capset``); checked in ``/proc/self/status``."""
    import ctypes

    for capability in range(64):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP; EINVAL past the last capability
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data_sets = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice (capabilities 0-63), all 0
    _check(libc.capset(header, data_sets), "capset")
    _check_no_capability()


def _check_no_capability() -> None:
    """Raise ``PermissionError`` where this process holds a capability (``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    if any(int(status[key], 16) for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb")):
        raise PermissionError("the copy kept a capability")
