"""The kernel template's own program: a process with the imports done that forks new kernels.

This program runs *inside* the template process, started by path (``python zygote.py CONFIG``) with the
kernel's Python (the tool's own, a kernel environment's venv, or a container's), so it imports nothing
of ``themisto_env``: only the standard library, ipykernel and dill. The host side is
`themisto_env.sandbox.template.core`, which writes the program (`write_program`: its parts, `PARTS`,
a private module each, joined into one file) and the in-kernel helper into the template's run directory,
where every backend's template sees them (a bwrap template's bind, a docker template's mount).

A template holds no thread, no zmq context and no event loop of its own (forking a *running* kernel
breaks its ioloop, its zmq contexts and its threads: ipykernel PRs #410 and #1261). It imports the
dataset's modules, ipykernel and the in-kernel helper once, freezes its objects out of the garbage
collector (``gc.freeze``: a child's collections then do not write to the pages it shares with the
template), and answers requests on a unix socket, one JSON line each:

- ``fork``: fork a child that builds its own ipykernel application (connection file, sockets,
  heartbeat, threads, ioloop) after the fork, in its own session, and becomes a kernel. The reply
  carries the child's pid and, as an ``SCM_RIGHTS`` file descriptor, a pidfd of it (the host watches
  and signals the kernel through it, with no race against pid reuse).
- ``derive``: fork a child that loads a snapshot (its bytes checked against their digest) into a user
  namespace and becomes a template itself, on a socket of its own: the *state template* of that
  snapshot. Kernels forked from it start in that state without loading anything.
- ``status``: the template's state (``ok``, the names it holds, or the error that made it unusable),
  and the exit status of a child it reaped.
- ``exit``: end the template (its kernels go with it: each watches its parent).

A template ends by itself when its parent is gone (it polls ``getppid``, as ipykernel's parent poller
does), and so do the kernels it forked (``JPY_PARENT_PID`` names the template).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from themisto_env.sandbox.kernel.helper import helper_source
from themisto_env.sandbox.kernel.sources import SHARED_PARTS, assemble

__all__ = ["HELPER_FILE", "ISOLATE_VARIABLE", "PARTS", "PROGRAM_FILE", "program_source", "write_program"]

#: The variable that tells a bwrap template's copies to isolate themselves, with their limits (the program reads
#: it under this name: `_copy_namespaces.ISOLATE_VARIABLE`, checked equal by tests/sandbox/test_program_sources.py).
ISOLATE_VARIABLE = "THEMISTO_ISOLATE_COPIES"

#: The program's parts, each after the parts it imports from: the order of its one file (after the shared part
#: `themisto_env.sandbox.compat.in_kernel`, the only one that may use other libraries' private names).
PARTS = ("_channel", "_copy_uid", "_copy_namespaces", "_app", "_children", "_server", "_main")
#: The program's file name in a template's run directory (the command line ends in it: ``... zygote.py``).
PROGRAM_FILE = "zygote.py"
#: The in-kernel helper's file name in a template's run directory (the program installs it before forking).
HELPER_FILE = "helper.py"


@cache
def program_source() -> str:
    """The template's program as one source (its parts joined: see the module's docstring)."""
    return assemble(__name__, PARTS, shared=SHARED_PARTS)


def write_program(folder: Path) -> Path:
    """Write the template's program (`PROGRAM_FILE`) and the in-kernel helper (`HELPER_FILE`) into a
    template's run directory, read-only; return the program's path."""
    for name, text in ((PROGRAM_FILE, program_source()), (HELPER_FILE, helper_source())):
        path = folder / name
        path.write_text(text)
        os.chmod(path, 0o444)
    return folder / PROGRAM_FILE
