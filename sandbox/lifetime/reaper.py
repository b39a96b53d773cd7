"""Kernels never outlive their owner (the host process that started them): the atexit hook and the reaper.

A normal exit closes every kernel still open (an ``atexit`` hook, registered at the first start). At a
process's first kernel start a small *reaper* process starts in its own session: it waits for the owner to
die and then removes what the owner left (`themisto_env.sandbox.lifetime.leftovers`, from each run
directory's ``owner.json``: `themisto_env.sandbox.lifetime.owners`), so a ``SIGKILL``\\ed owner takes its
kernels with it on every backend. ``themisto sandbox gc`` removes what a dead reaper left. This module,
`owners` and `leftovers` use the standard library only: the reaper loads them by file path, without
importing the package, to stay small.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import select
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from themisto_env.sandbox.lifetime.leftovers import (
    collect,
    leftovers,
    owner_containers,
    remove,
    remove_containers,
)
from themisto_env.sandbox.lifetime.owners import (
    boot_id,
    identity,
    process_start,
)

__all__ = [
    "REAPER_MODULES",
    "main",
    "reap",
    "reaper_command",
    "reaper_pids",
    "start_reaper",
    "track",
    "tracked",
    "untrack",
    "wait_for_exit",
]

#: The modules the reaper loads by file path, in import order (each imports only the ones before it).
REAPER_MODULES = ("owners", "leftovers", "reaper")

# -- in the owner: atexit and the reaper ---------------------------------------------------------------------

_kernels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # kernel -> owner pid
_atexit_registered = False
_reapers: dict[tuple[int, str], int] = {}  # (owner pid, root) -> reaper pid
_lock = threading.Lock()  # kernels start and close on several threads (a pool's, a discard's)


def track(kernel: Any, run_dir: Path, *, reaper: bool = True) -> None:
    """Called by a kernel as it starts: close it at interpreter exit, and have a reaper watch its owner.

    At this process's first start in a temporary root, what dead owners left in that root is removed,
    and a reaper for (this process, root) is started. ``reaper=False``: the run directory lies inside one
    a reaper already watches (a kernel forked from a template, in the template's folder): the atexit
    hook only.
    """
    global _atexit_registered
    pid = os.getpid()
    with _lock:
        _kernels[kernel] = pid
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True
        root = str(run_dir.parent)
        if not reaper:
            return
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


def tracked() -> list[Any]:
    """The kernels and kernel templates this process started and has not closed yet (alive or not: a
    kernel that died stays here until its owner closes it)."""
    pid = os.getpid()
    with _lock:
        return [kernel for kernel, owner in _kernels.items() if owner == pid]


#: Threads that start or close kernels in the background (a pool's, a discard's): at exit they finish
#: before the kernels are closed, else a kernel's sockets close under a thread polling them and libzmq
#: aborts the process (``Assertion failed: pfd.revents & POLLIN``, exit code 134).
BACKGROUND_THREADS = ("themisto-kernel-pool", "themisto-discard")
#: How long the exit hook waits for each of them (a start takes about a second).
BACKGROUND_JOIN_S = 30.0


def _close_all() -> None:
    """atexit: let the background starts and discards finish, then close the kernels this process started
    (never a parent's, after a fork), so that no socket closes under a thread still using it."""
    pid = os.getpid()
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and thread.name in BACKGROUND_THREADS:
            thread.join(timeout=BACKGROUND_JOIN_S)
    with _lock:
        kernels = list(_kernels.items())
    for kernel, owner in kernels:
        if owner == pid:
            with contextlib.suppress(Exception):
                kernel.close()


def reaper_command(root: str, owner: dict[str, Any] | None = None) -> list[str]:
    """The reaper's command line: `REAPER_MODULES` loaded by file path under their own names (the
    package's ``__init__`` is not run), then `main`."""
    owner = owner or identity()
    folder = os.path.dirname(os.path.abspath(__file__))
    modules = [(f"{__package__}.{name}", os.path.join(folder, f"{name}.py")) for name in REAPER_MODULES]
    boot = (
        "import importlib.util, sys\n"
        f"for name, path in {modules!r}:\n"
        "    spec = importlib.util.spec_from_file_location(name, path)\n"
        "    module = importlib.util.module_from_spec(spec)\n"
        "    sys.modules[name] = module\n"
        "    spec.loader.exec_module(module)\n"
        "module.main(sys.argv[1:])\n"
    )
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
        if fd is not None:  # poll, not select: select refuses descriptors numbered 1024 and up
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll()
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
