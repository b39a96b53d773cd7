"""Where kernel run directories go: the temporary folder, or a short private folder when its path is too long.

A kernel's IPC sockets live in its run directory (`ROOT/themisto-kernel-XXXXXXXX/k-1`; a forked kernel's one
level deeper, in its template's `kernels/` folder), and a Unix socket's path holds at most `MAX_SOCKET_PATH`
bytes: under a deep `TMPDIR` (a tool that points it at a folder of its own, deep under `~/.cache`) a kernel
start would fail with `ZMQError: File name too long`. `run_root()` gives the temporary folder when the
sandbox's longest path below it fits, and otherwise a short folder of this user's (`/tmp/themisto-UID`, else
under `/dev/shm`): private (`0700`), owned by this process's user, checked on every use (never a link, never
another user's). Every caller gets this from the sandbox; none has to shorten `TMPDIR` itself. The run
directories in it are made, owned and cleaned like any other (closed with their kernel, reaped when their
owner dies, found by `themisto sandbox gc`); the folder itself, empty between runs, stays, as `/tmp` does.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from themisto_env.errors import KernelStartError
from themisto_env.sandbox.lifetime.owners import SHORT_ROOTS

__all__ = ["MAX_SOCKET_PATH", "SOCKET_SUFFIX", "run_root", "short_root"]

#: The longest path of a Unix socket, in bytes (``sun_path`` holds 108, the last a NUL).
MAX_SOCKET_PATH = 107
#: The longest path the sandbox makes below the root, in bytes: a forked kernel's socket,
#: ``/themisto-kernel-XXXXXXXX/kernels/themisto-kernel-XXXXXXXX/k-NNNNN`` (63), with room to spare.
SOCKET_SUFFIX = 72


def run_root() -> Path:
    """The folder new run directories go in: the temporary folder (``TMPDIR``) when the sandbox's sockets
    fit below it, else `short_root()`.

    Raises:
        KernelStartError: The temporary folder is too deep and no short folder can be had.
    """
    root = Path(tempfile.gettempdir())
    if len(os.fsencode(root)) + SOCKET_SUFFIX <= MAX_SOCKET_PATH:
        return root
    return short_root()


def short_root() -> Path:
    """This user's short private folder (``/tmp/themisto-UID``, else under ``/dev/shm``), made ``0700`` if
    missing; one that is a link, not a folder, another user's or open to others is passed over.

    Raises:
        KernelStartError: No such folder can be had.
    """
    uid, refused = os.getuid(), []
    for base in SHORT_ROOTS:
        folder = base / f"themisto-{uid}"
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            refused.append(f"{folder}: {exc.strerror}")
            continue
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or stat.S_IMODE(info.st_mode) & 0o077:
            refused.append(f"{folder}: not a private folder of uid {uid}")
            continue
        return folder
    raise KernelStartError(
        f"the temporary folder {tempfile.gettempdir()} is too deep for kernel sockets ({MAX_SOCKET_PATH} bytes) "
        f"and no short folder can be made ({'; '.join(refused)}): set TMPDIR to a short folder"
    )
