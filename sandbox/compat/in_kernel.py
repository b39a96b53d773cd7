"""The kernel's reaches into other libraries' private names, and its patches of the Jupyter stack: the one
part of the in-kernel helper and of the template's program that may use them.

A part of both in-kernel programs (see `themisto_env.sandbox.kernel.sources`): it imports only the standard
library at its top, and each library where it is used, so that a kernel without it still loads the part.
Every function says the versions it was tested on (requirements/lock.txt); a newer one that moved a name
makes the function fall back (said in its docstring) rather than raise.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any


def forget_trait_value(owner: Any, name: str) -> None:
    """Make a built trait default lazy again: traitlets builds it anew when it is next read. traitlets keeps
    built values in ``_trait_values``, with no public way to forget one; without it, nothing happens.

    Tested on traitlets 5.16.1.
    """
    with contextlib.suppress(AttributeError):
        owner._trait_values.pop(name, None)


def give_kernel_module_files(kernel: Any, files: list[str]) -> None:
    """Give an ipykernel kernel object the list of loaded modules' files its debugger uses
    (``IPythonKernel._kernel_modules``, listed by its ``__init__`` over every loaded module).

    Tested on ipykernel 7.4.0.
    """
    kernel._kernel_modules = files


def give_shell_module_names(shell: Any, names: set[str]) -> None:
    """Give an IPython shell the names of the modules loaded at its start, which ``%reset --aggressive``
    keeps (``InteractiveShell._sys_modules_keys``, set by ``InteractiveShellApp.init_code``).

    Tested on IPython 9.18.1.
    """
    shell._sys_modules_keys = names


def with_kernel_module_seeing(view: Any, run: Callable[[], Any]) -> Any:
    """``run()`` while ipykernel's kernel module sees ``view`` as its ``sys`` (its kernel object's ``__init__``
    lists every loaded module there); patched back after.

    Tested on ipykernel 7.4.0.
    """
    import ipykernel.ipkernel

    ipykernel.ipkernel.sys = view  # type: ignore[attr-defined]
    try:
        return run()
    finally:
        ipykernel.ipkernel.sys = sys  # type: ignore[attr-defined]


def without_configuration(run: Callable[[], Any]) -> Any:
    """``run()`` while ``BaseIPythonApplication.initialize`` (an IPython application's configuration: command
    line, config files, profile) does nothing, so that ``IPKernelApp.initialize`` runs only its later steps;
    patched back after.

    Tested on IPython 9.18.1 and ipykernel 7.4.0.
    """
    from IPython.core.application import BaseIPythonApplication

    configured = BaseIPythonApplication.initialize
    BaseIPythonApplication.initialize = lambda self, argv=None: None  # type: ignore[method-assign]
    try:
        return run()
    finally:
        BaseIPythonApplication.initialize = configured  # type: ignore[method-assign]


def cell_files_in(folder: str) -> bool:
    """Make ipykernel name each cell's code file in ``folder`` (its ``compiler.get_tmp_directory``, else
    ``<tempdir>/ipykernel_<pid>``). Returns whether ipykernel's compiler was found.

    Tested on ipykernel 7.4.0.
    """
    compiler = sys.modules.get("ipykernel.compiler")
    if compiler is None or not hasattr(compiler, "get_tmp_directory"):
        return False
    compiler.get_tmp_directory = lambda: folder
    return True


def point_dill_at_main() -> None:
    """Point dill at the current ``__main__`` (it binds ``dill._dill._main_module`` when first imported).

    Tested on dill 0.4.1.
    """
    dill_module = sys.modules.get("dill._dill")
    if dill_module is not None:
        dill_module._main_module = sys.modules["__main__"]


def compiled_patterns() -> list[list[Any]]:
    """The string patterns in the ``re`` module's cache, as ``[pattern, flags]`` (empty where it keeps
    none under ``re._cache``).

    Tested on CPython 3.11.
    """
    import re

    cache = getattr(re, "_cache", {})
    return [[key[1], int(key[2])] for key in list(cache) if isinstance(key, tuple) and key[0] is str]


def warning_filters_changed() -> None:
    """Tell ``warnings`` its filters were replaced in place (``warnings._filters_mutated``: its cache of
    "already warned" is then dropped); nothing where the function is gone.

    Tested on CPython 3.11.
    """
    import warnings

    mutated = getattr(warnings, "_filters_mutated", None)
    if callable(mutated):
        mutated()


def pandas_options(pd: Any) -> dict[str, Any] | None:
    """pandas' registered options, by key, each with its default as ``defval``
    (``pandas._config.config._registered_options``), or None where pandas keeps them otherwise.

    Tested on pandas 3.1.1.
    """
    registered = getattr(getattr(getattr(pd, "_config", None), "config", None), "_registered_options", None)
    return registered if isinstance(registered, dict) else None


def pandas_backing_array(values: Any) -> Any:
    """The numpy array a pandas array stores its values in (``DatetimeArray``, ``TimedeltaArray``,
    ``NumpyExtensionArray``: ``_ndarray``), or None.

    Tested on pandas 3.1.1.
    """
    return getattr(values, "_ndarray", None)


def pandas_blocks(frame: Any) -> Any:
    """A DataFrame's blocks (``frame._mgr.blocks``: its columns, grouped by dtype), or None.

    Tested on pandas 3.1.1.
    """
    return getattr(getattr(frame, "_mgr", None), "blocks", None)


def legacy_bit_generator(state: Any) -> Any:
    """The bit generator behind a numpy ``RandomState`` (``_bit_generator``), or None.

    Tested on numpy 2.4.6.
    """
    return getattr(state, "_bit_generator", None)
