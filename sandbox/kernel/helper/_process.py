"""The kernel process beyond the user namespace: installed versions, stable cell file names, the
process state a step changes (extensions, hooks, modules, warning filters, folder), install, preload.

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from themisto_env.sandbox.compat.in_kernel import cell_files_in, warning_filters_changed
from themisto_env.sandbox.kernel.helper._namespace import _shell
from themisto_env.sandbox.kernel.helper._randomness import keep_random_state


def package_versions(names: list[str]) -> dict[str, str]:
    """The installed version of each distribution (``absent`` where it is not installed)."""
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def loaded_distributions() -> dict[str, str]:
    """Installed distributions (with versions) whose top-level modules are imported in this kernel."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    versions: dict[str, str] = {}
    for top in sorted({name.partition(".")[0] for name in list(sys.modules)}):
        for dist in owners.get(top, ()):
            with contextlib.suppress(Exception):
                versions[dist] = metadata.version(dist)
    return versions


#: The folder in every cell's code file name, the same in every kernel. ipykernel's own is
#: ``<tempdir>/ipykernel_<pid>``: a name that changes with each process, which warnings, tracebacks and the
#: snapshots of cell-defined functions (``co_filename``) carry, so two replays of the same cells differed.
CELL_FOLDER = "/tmp/ipykernel"


def stable_cell_names() -> bool:
    """Name each cell's code file ``CELL_FOLDER/<murmur2 hash of the code>.py`` (ipykernel's hash, without
    its process id). Only the name changes: IPython still caches each cell's lines in ``linecache`` under
    it, so tracebacks and ``inspect.getsource`` show the cell's code; no file is written. Returns whether
    ipykernel's compiler was found (a kernel without it names cells ``<ipython-input-N-...>``, stable
    already)."""
    return cell_files_in(CELL_FOLDER)


#: The process state before the latest step, kept by `keep_process_state` (one at a time).
_PROCESS_STATE: dict[str, Any] = {}
#: IPython's lists of input and AST transformers, by (object path, attribute): extensions add to them.
_TRANSFORMERS = (
    ("", "input_transformers_post"),
    ("", "ast_transformers"),
    ("input_transformer_manager", "cleanup_transforms"),
    ("input_transformer_manager", "line_transforms"),
)


def _transformer_lists(shell: Any) -> dict[str, list[Any]]:
    lists = {}
    for owner, name in _TRANSFORMERS:
        value = getattr(getattr(shell, owner, None) if owner else shell, name, None)
        if isinstance(value, list):
            lists[f"{owner}.{name}"] = value
    return lists


def _hooks(shell: Any) -> dict[str, Any]:
    """IPython's tables an extension registers into: magics (line, cell), the magics registry, event
    callbacks, transformers; each a dict or list, by a name of its own."""
    manager = shell.magics_manager
    tables: dict[str, Any] = {f"magics.{kind}": table for kind, table in manager.magics.items()}
    tables["registry"] = manager.registry
    tables.update({f"events.{event}": functions for event, functions in shell.events.callbacks.items()})
    tables.update(_transformer_lists(shell))
    return tables


def _installation_dirs() -> tuple[str, ...]:
    """The folders Python and its installed packages live in (a module from elsewhere is the user's)."""
    import site
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    dirs.update(v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib"))
    with contextlib.suppress(Exception):
        dirs.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        dirs.add(site.getusersitepackages())
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


def _users_module(module: Any, installed: tuple[str, ...]) -> bool:
    """A module of the user's own Python files (their folder, a path they added), not an installed one: it
    can be imported again. Extension modules and installed packages are never imported twice."""
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return False
    return not os.path.realpath(path).startswith(installed)


def _owned(obj: Any, modules: set[str]) -> bool:
    """Whether ``obj`` (a function, a bound method, a ``Magics`` instance, ...) was defined in one of
    ``modules`` or a submodule."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        module = getattr(type(obj), "__module__", "")
    return any(module == name or module.startswith(name + ".") for name in modules)


def keep_process_state(random_key: str | None = None) -> bool:
    """Keep what a cell can change outside the user namespace, which a snapshot does not hold: IPython's
    loaded extensions and what they register (magics, event callbacks, transformers), the modules in
    ``sys.modules``, the warning filters and the current folder (one state at a time: the one before the
    step about to run). With ``random_key``, the global random generators' states too
    (`keep_random_state`). Returns True."""
    import warnings

    shell = _shell()
    _PROCESS_STATE.clear()
    _PROCESS_STATE.update(
        extensions=set(shell.extension_manager.loaded),
        hooks={name: dict(table) if isinstance(table, dict) else list(table) for name, table in _hooks(shell).items()},
        modules=set(sys.modules),
        filters=list(warnings.filters),
        cwd=os.getcwd(),
    )
    if random_key is not None:
        keep_random_state(random_key)
    return True


def put_back_process_state() -> dict[str, list[str]]:
    """Undo, as far as a cell run again can tell, what the cell changed since `keep_process_state`:
    the extensions it loaded are no longer loaded, and what they or the user's own modules it imported first
    registered (magics, event callbacks, transformers) is gone; those modules are imported anew; the warning
    filters and the current folder are as they were. What installed packages registered stays (they are not
    imported again: a figure's display hook that pyplot's first import set up must stay). Returns the
    extensions unloaded and the modules forgotten."""
    import warnings

    state = _PROCESS_STATE
    if not state:
        return {"extensions": [], "modules": []}
    shell = _shell()
    loaded = shell.extension_manager.loaded
    unloaded = sorted(set(loaded) - state["extensions"])
    installed = _installation_dirs()
    forgotten = sorted(
        name for name in set(sys.modules) - state["modules"] if _users_module(sys.modules.get(name), installed)
    )
    owners = {*unloaded, *forgotten}
    loaded.difference_update(unloaded)
    for name, table in _hooks(shell).items():
        before = state["hooks"].get(name) or ({} if isinstance(table, dict) else [])
        if isinstance(table, dict):
            for key, value in list(table.items()):
                if (key not in before or before[key] is not value) and _owned(value, owners):
                    if key in before:
                        table[key] = before[key]
                    else:
                        del table[key]
        else:
            kept = {id(item) for item in before}
            table[:] = [item for item in table if id(item) in kept or not _owned(item, owners)]
    for name in forgotten:
        module = sys.modules.pop(name, None)
        parent, _, child = name.rpartition(".")
        if parent and getattr(sys.modules.get(parent), child, None) is module:
            with contextlib.suppress(Exception):
                delattr(sys.modules[parent], child)
    warnings.filters[:] = state["filters"]
    with contextlib.suppress(Exception):
        warning_filters_changed()
    with contextlib.suppress(OSError):  # a cell that ran `%cd data` runs it again from where it was
        os.chdir(state["cwd"])
    return {"extensions": unloaded, "modules": forgotten}


def install() -> bool:
    """Make ``get_ipython`` a builtin outside cells too (IPython provides it only while a cell runs), and
    give cells file names that do not depend on the kernel's process (`stable_cell_names`).

    Libraries decide how to display things at import time by looking for it: pandas imported outside a
    cell (by a snapshot's restore, or a preload) would believe it runs in a terminal and print frames
    another way than in the recording. Returns whether ``get_ipython`` had to be added."""
    import builtins

    stable_cell_names()
    if hasattr(builtins, "get_ipython"):
        return False
    builtins.get_ipython = _shell().get_ipython  # type: ignore[attr-defined]
    return True


def preload(modules: list[str]) -> list[str]:
    """Import these modules (into ``sys.modules`` only: no user name is bound); return those imported."""
    import importlib

    loaded = []
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
            loaded.append(name)
    return loaded
