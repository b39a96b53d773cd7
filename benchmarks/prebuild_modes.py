"""The benchmarks' own switch for the kernel template's earlier steps (the library has none): a template
started inside `prebuild_mode` runs a program whose prebuild is that of an earlier step, for a "before" row.

- ``"0"``: no application built before the fork (each copy builds all of it, as ipykernel does);
- ``"shell"``: only the configuration and the IPython shell (a copy still lists every loaded module and looks
  for startup files, as an ``IPKernelApp`` does);
- ``"app"``: all of it but what IPython builds on a first cell (the display formatters), built in each copy
  on its first cell and not warmed before it answers;
- ``"1"``: the library's own program (now).

It patches the program's source (`themisto_env.sandbox.template.zygote.program_source`) while templates
start: the overrides below are put before its ``main`` runs, so each replaces the part of that name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import themisto_env.sandbox.template.zygote as zygote

_FIRST_CELL_IN_THE_COPY = """
_build_lazy_parts = lambda shell: None
_benchmark_prebuild_app = _prebuild_app


def _prebuild_app(namespace, modules=None):
    app = _benchmark_prebuild_app(namespace, modules)
    app.first_cell_built = False
    return app
"""

OVERRIDES = {
    "0": "\n\ndef _prebuild(namespace, modules=None):\n    return None, None\n",
    "app": _FIRST_CELL_IN_THE_COPY,
    "shell": _FIRST_CELL_IN_THE_COPY
    + '\n_forked_app_class = lambda: __import__("ipykernel.kernelapp", fromlist=["_"]).IPKernelApp\n',
}


@contextlib.contextmanager
def prebuild_mode(mode: str) -> Iterator[None]:
    """Templates started inside build their kernel application as ``mode`` says (see the module)."""
    if mode == "1":
        yield
        return
    original = zygote.program_source
    source = original()
    start = source.rindex('\nif __name__ == "__main__":')
    patched = source[:start] + "\n" + OVERRIDES[mode] + source[start:]
    zygote.program_source = lambda: patched  # type: ignore[assignment]
    try:
        yield
    finally:
        zygote.program_source = original  # type: ignore[assignment]
