"""The kernel template's own program: a process with the imports done that forks new kernels.

It runs *inside* the template process with the kernel's Python, so it imports nothing of ``themisto_env``:
only the standard library, ipykernel and dill. The host side (`themisto_env.sandbox.template.core`) writes
it, its parts (`PARTS`) joined into one file, into the template's run directory. The template holds no
thread, zmq context or event loop (forking a running kernel breaks them), freezes its objects out of the
garbage collector, and answers one JSON line per request on a unix socket: ``fork`` (a new kernel),
``derive`` (a state template), ``status`` and ``exit``. It ends when its parent is gone, and so do its kernels.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from themisto_env.sandbox.kernel.helper import helper_source
from themisto_env.sandbox.kernel.sources import SHARED_PARTS, assemble
from themisto_env.sandbox.template.zygote._copy_namespaces import ISOLATE_VARIABLE  # the host sets what it reads

__all__ = ["HELPER_FILE", "ISOLATE_VARIABLE", "PARTS", "PROGRAM_FILE", "program_source", "write_program"]

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
