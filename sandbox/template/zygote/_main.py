"""The program's start (``python zygote.py CONFIG``): install the helper, import what a kernel imports,
freeze, serve.

A part of the template's program (see `themisto_env.sandbox.template.zygote`): sent whole with the other
parts, it imports only the standard library, ipykernel and dill, and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import signal
import sys
import types
from typing import Any

from themisto_env.sandbox.compat.in_kernel import compiled_patterns
from themisto_env.sandbox.template.zygote._app import HELPER_MODULE, KERNEL_ARGS, _prebuild
from themisto_env.sandbox.template.zygote._channel import _name_process, _redirect_output
from themisto_env.sandbox.template.zygote._server import Template


def _kernel_imports(folder: str) -> dict[str, list[Any]]:
    """The modules a kernel imports and the regular expressions it compiles as it starts, found by starting
    one in a throwaway child (on a connection file of its own, in ``folder``) that reports them and exits:
    the template imports and compiles them once (``modules``; ``patterns``: pattern and flags)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            _redirect_output(os.path.join(folder, "probe.log"))
            connection_file = os.path.join(folder, "probe.json")
            ports = {f"{name}_port": i + 1 for i, name in enumerate(("shell", "iopub", "stdin", "control", "hb"))}
            info = {"transport": "ipc", "ip": os.path.join(folder, "probe"), "key": "", **ports}
            with open(connection_file, "w") as f:
                json.dump({**info, "signature_scheme": "hmac-sha256", "kernel_name": ""}, f)
            before = set(sys.modules)
            from ipykernel.kernelapp import IPKernelApp

            IPKernelApp.instance().initialize(["-f", connection_file, *KERNEL_ARGS])
            names = [name for name in sys.modules if name not in before]
            patterns = compiled_patterns()
            os.write(write_end, json.dumps({"modules": names, "patterns": patterns}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    data = b""
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    for name in os.listdir(folder):
        if name.startswith("probe"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    return json.loads(data) if data else {}


def _warm_up(folder: str) -> None:
    """Import what earlier kernels of this template imported and compile their patterns (`_kernel_imports`), so
    their pages are the template's, shared by every copy."""
    import re

    warm = _kernel_imports(folder)
    for name in warm.get("modules", []):
        with contextlib.suppress(BaseException):
            importlib.import_module(name)
    for pattern, flags in warm.get("patterns", []):
        with contextlib.suppress(BaseException):
            re.compile(pattern, flags)


def _install_helper(path: str) -> None:
    """The in-kernel helper, installed as the host installs it in a started kernel."""
    with open(path) as f:
        source = f.read()
    module = types.ModuleType(HELPER_MODULE)
    exec(compile(source, "<themisto-helper>", "exec"), module.__dict__)
    module.SOURCE = source
    module.sealed_code()  # each copy seals a private copy of the helper before model code runs: compiled here once
    sys.modules[HELPER_MODULE] = module


def _leave_own_folder() -> None:
    """Take this program's folder (the run directory, which Python puts first on ``sys.path`` for a program
    run by path) off ``sys.path``: a forked kernel's imports then resolve as a started kernel's do
    (ipykernel's launcher takes its own first entry off), and ``import helper`` in a cell finds no file of
    the template's."""
    own = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == own:
        del sys.path[0]


def main() -> None:
    """``python zygote.py CONFIG_JSON``: import, freeze, serve. CONFIG: ``socket``, ``preload`` (module
    names), ``helper`` (the helper's source file), ``environment`` (variables to set)."""
    config = json.loads(sys.argv[1])
    _leave_own_folder()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(config.get("environment", {}))
    import dill  # noqa: F401 - snapshots load in the template (derive)
    import ipykernel.ipkernel
    import ipykernel.kernelapp  # noqa: F401
    import IPython.core.interactiveshell  # noqa: F401

    _install_helper(config["helper"])
    for name in config.get("preload", []):
        with contextlib.suppress(BaseException):
            importlib.import_module(name)
    _warm_up(os.path.dirname(config["socket"]))
    _name_process("themisto-tmpl")
    template = Template(config["socket"], parent=os.getppid())
    template.app, template.prebuild_error = _prebuild(None)
    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    template.serve()


if __name__ == "__main__":
    main()
