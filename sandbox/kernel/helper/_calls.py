"""How the host calls the helper: sealed private copies (`seal`) and the dispatch by name (`call`).

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import json
import types
from typing import Any

from themisto_env.sandbox.kernel.helper._fingerprint import namespace_fingerprint
from themisto_env.sandbox.kernel.helper._namespace import Refused, _shell, state_fingerprint
from themisto_env.sandbox.kernel.helper._process import (
    install,
    keep_process_state,
    loaded_distributions,
    package_versions,
    preload,
    put_back_process_state,
)
from themisto_env.sandbox.kernel.helper._randomness import (
    put_back_random_state,
    reseed_generators,
    shuffle_random_state,
)
from themisto_env.sandbox.kernel.helper._snapshots import restore, snapshot
from themisto_env.sandbox.kernel.helper._variables import (
    dataframe,
    inspect_variable,
    kernel_memory,
    list_variables,
    memory,
    source,
    variable_sizes,
)

#: The source this module was installed from (set by the host at install time; `seal` copies it).
SOURCE = ""
#: Sealed copies of this module, by random token (see `seal`).
SEALED: dict[str, dict[str, Any]] = {}
#: `SOURCE` compiled for `seal`, by source (a template compiles it before it forks: each copy seals for free).
SEALED_CODE: dict[str, types.CodeType] = {}


def sealed_code() -> types.CodeType:
    """`SOURCE` compiled for a sealed copy, once per process (and once per template, before its copies)."""
    code = SEALED_CODE.get(SOURCE)
    if code is None:
        code = SEALED_CODE[SOURCE] = compile(SOURCE, "<themisto-sealed>", "exec")
    return code


def seal() -> str:
    """Make a private copy of this module for measuring what later code does; return its token.

    The copy is compiled from `SOURCE` into a namespace of its own, with a copy of the builtins as
    they are now, snapshots of the standard modules it uses (so rebinding ``hashlib.sha1`` later does not
    reach it), and the shell's namespace dicts captured now (so rebinding ``user_ns`` later does not
    either). Later code can still find it (nothing in one process is out of reach), which is why the host
    also checks canary names it plants after that code ran.
    """
    import builtins
    import secrets

    shell = _shell()
    frozen_shell = types.SimpleNamespace(user_ns=shell.user_ns, user_ns_hidden=dict(shell.user_ns_hidden))
    private: dict[str, Any] = {"__builtins__": dict(vars(builtins)), "__name__": "_themisto_sealed"}
    exec(sealed_code(), private)
    for name, value in list(private.items()):
        if isinstance(value, types.ModuleType) and name in _STANDARD_MODULES:
            private[name] = types.SimpleNamespace(**vars(value))
    private["_shell"] = lambda: frozen_shell
    private["_user_ns"] = lambda: frozen_shell.user_ns
    token = secrets.token_hex(16)
    SEALED[token] = private
    return token


_STANDARD_MODULES = frozenset({"contextlib", "hashlib", "io", "json", "os", "reprlib", "sys", "types"})


FUNCTIONS = {
    f.__name__: f
    for f in (
        list_variables,
        inspect_variable,
        dataframe,
        memory,
        kernel_memory,
        variable_sizes,
        source,
        state_fingerprint,
        namespace_fingerprint,
        package_versions,
        loaded_distributions,
        snapshot,
        restore,
        preload,
        seal,
        install,
        put_back_random_state,
        shuffle_random_state,
        reseed_generators,
        keep_process_state,
        put_back_process_state,
    )
}


def call(name: str, kwargs_json: str = "{}") -> str:
    """Run helper ``name`` with JSON keyword arguments; return ``{"ok": value}``, ``{"refused": {...}}``
    (it declined: ``detail``, ``name``, and ``suggestions`` for an unknown name) or ``{"raised": ...}``."""
    try:
        value = FUNCTIONS[name](**json.loads(kwargs_json))
        return json.dumps({"ok": value}, default=str)
    except Refused as exc:
        return json.dumps({"refused": {"detail": str(exc), "name": exc.name, "suggestions": exc.suggestions}})
    except Exception as exc:
        return json.dumps({"raised": f"{type(exc).__name__}: {exc}"})
