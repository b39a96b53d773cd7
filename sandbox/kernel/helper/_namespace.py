"""The user's namespace as the helper sees it: the shell, the user's names and values, sizes and
bounded reprs, and `Refused` (the helper declines to answer).

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import reprlib
import sys
import types
from typing import Any

#: IPython's own names, never part of the user's state.
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})


def _shell() -> Any:
    from IPython import get_ipython

    return get_ipython()


def _user_ns() -> dict[str, Any]:
    return _shell().user_ns  # type: ignore[no-any-return]


def user_names(include_modules: bool = True) -> list[str]:
    """The names a user defined: not IPython's, not hidden, not starting with an underscore."""
    shell = _shell()
    hidden = shell.user_ns_hidden
    names = []
    for name, value in list(shell.user_ns.items()):
        if name.startswith("_") or name in IPYTHON_NAMES:
            continue
        if name in hidden and hidden[name] is value:
            continue
        if not include_modules and isinstance(value, types.ModuleType):
            continue
        names.append(name)
    return names


def _type_name(obj: Any) -> str:
    cls = type(obj)
    module = cls.__module__
    return cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"


def _deep_size(obj: Any, seen: set[int] | None = None, budget: list[int] | None = None) -> int:
    """Approximate memory held by an object (numpy nbytes, pandas deep usage, containers recursively)."""
    seen = set() if seen is None else seen
    budget = [10_000] if budget is None else budget
    if id(obj) in seen or budget[0] <= 0:
        return 0
    seen.add(id(obj))
    budget[0] -= 1
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(obj, (pd.DataFrame, pd.Series, pd.Index)):
        try:
            usage = obj.memory_usage(deep=True)
            return int(usage.sum() if hasattr(usage, "sum") else usage)
        except Exception:
            return sys.getsizeof(obj)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return int(obj.nbytes + sys.getsizeof(obj) * (obj.base is None))
    size = sys.getsizeof(obj)
    if isinstance(obj, (str, bytes, bytearray, int, float, complex, bool, types.ModuleType, type)):
        return size
    if isinstance(obj, dict):
        return size + sum(_deep_size(k, seen, budget) + _deep_size(v, seen, budget) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return size + sum(_deep_size(item, seen, budget) for item in obj)
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(obj, (types.FunctionType, types.MethodType)):
        return size + _deep_size(attrs, seen, budget)
    return size


def _attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, also None where the object's ``__getattr__`` raises something else."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _shape(obj: Any) -> list[int] | None:
    shape = _attribute(obj, "shape")
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        return list(shape)
    return None


def _length(obj: Any) -> int | None:
    if isinstance(obj, (type, types.ModuleType)):
        return None
    try:
        return len(obj)
    except Exception:
        return None


def _bounded_repr(obj: Any, max_chars: int) -> str:
    """repr() as the notebook shows it (dicts in insertion order); reprlib only for big containers."""
    small = isinstance(obj, (list, tuple, dict, set, frozenset)) and len(obj) <= 200
    if isinstance(obj, (list, tuple, dict, set, frozenset, str, bytes)) and not small:
        r = reprlib.Repr()
        r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = 50
        r.maxstring = r.maxother = max_chars
        r.maxlevel = 4
        text = r.repr(obj)
    else:
        try:
            text = repr(obj)
        except Exception as exc:  # a broken __repr__ is the user's, not ours
            text = f"<repr failed: {type(exc).__name__}: {exc}>"
    if len(text) > max_chars:
        text = text[:max_chars] + f"... [{len(text) - max_chars} more characters]"
    return text


class Refused(Exception):
    """The helper declines to answer (a sentence for the agent); ``suggestions`` (the nearest names, possibly
    none) is set when no such name exists."""

    def __init__(self, message: str, *, name: str | None = None, suggestions: list[str] | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.suggestions = suggestions


def _user_value(name: str) -> Any:
    """The user variable ``name``; `Refused` with the nearest names when there is none."""
    ns = _user_ns()
    if name in ns and name in user_names():
        return ns[name]
    import difflib

    near = difflib.get_close_matches(name, user_names(), n=3)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    raise Refused(f"no variable named {name!r} in the kernel.{hint}", name=name, suggestions=near)


def _size(obj: Any) -> int:
    """`_deep_size`, or 0 where the object's own methods raise (one odd object spoils no listing)."""
    try:
        return _deep_size(obj)
    except Exception:
        return 0


def state_fingerprint() -> dict[str, Any]:
    """What must not change under introspection: user names with ids and types, ``_``, ``Out``, counter."""
    shell = _shell()
    ns = shell.user_ns
    return {
        "names": {name: [id(ns[name]), _type_name(ns[name])] for name in sorted(user_names())},
        "underscore": id(ns.get("_")),
        "out_keys": sorted(ns.get("Out", {})),
        "execution_count": shell.execution_count,
        "history_length": len(ns.get("In", [])),
    }
