"""What the tools ask about the user's variables: listings, one variable, a DataFrame, memory, source.

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

from themisto_env.sandbox.kernel.helper._namespace import (
    Refused,
    _attribute,
    _bounded_repr,
    _deep_size,
    _length,
    _shape,
    _size,
    _type_name,
    _user_ns,
    _user_value,
    user_names,
)


def list_variables(limit: int = 100, known: dict[str, int] | None = None) -> dict[str, Any]:
    """Name, type, size, and shape or length of each user variable (modules left out); the sizes in
    ``known`` (recorded ones the host shows anyway) are taken as they are, not measured."""
    known = known or {}
    names = user_names(include_modules=False)
    ns = _user_ns()
    rows = []
    for name in sorted(names)[:limit]:
        obj = ns[name]
        rows.append(
            {
                "name": name,
                "type": _type_name(obj),
                "size_bytes": known[name] if name in known else _size(obj),
                "shape": _shape(obj),
                "length": _length(obj),
            }
        )
    return {"variables": rows, "total": len(names)}


def inspect_variable(name: str, max_chars: int = 2000) -> dict[str, Any]:
    """A bounded repr of one variable with its type, shape, dtype, length and size."""
    obj = _user_value(name)
    dtype = _attribute(obj, "dtype")
    dtypes = _attribute(obj, "dtypes")
    info: dict[str, Any] = {
        "name": name,
        "type": _type_name(obj),
        "shape": _shape(obj),
        "length": _length(obj),
        "size_bytes": _deep_size(obj),
        "dtype": str(dtype) if dtype is not None and not callable(dtype) else None,
        "repr": _bounded_repr(obj, max_chars),
    }
    if dtypes is not None and hasattr(dtypes, "items"):
        info["dtypes"] = {str(k): str(v) for k, v in list(dtypes.items())[:50]}
    return info


def dataframe(name: str, view: str = "head", n: int = 5, max_chars: int = 4000) -> dict[str, Any]:
    """``head``, ``info`` or ``describe`` of a pandas DataFrame or Series, as text."""
    obj = _user_value(name)
    pd = sys.modules.get("pandas")
    if pd is None or not isinstance(obj, (pd.DataFrame, pd.Series)):
        raise Refused(f"{name!r} is a {_type_name(obj)}, not a pandas DataFrame or Series.", name=name)
    n, dtypes = max(1, min(int(n), 50)), None
    if view == "head":
        text = obj.head(n).to_string()
    elif view == "describe":
        text = obj.describe().to_string()
    elif view == "info":
        buf, frame = io.StringIO(), obj if isinstance(obj, pd.DataFrame) else obj.to_frame()
        frame.info(buf=buf)
        text = buf.getvalue()
        if len(frame.columns) <= pd.get_option("display.max_info_columns"):  # as info lists them
            dtypes = {str(column): str(dtype) for column, dtype in frame.dtypes.items()}
    else:
        raise Refused(f"unknown view {view!r}: use 'head', 'info' or 'describe'.", name=name)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... [{len(text) - max_chars} more characters]"
    return {"name": name, "view": view, "text": text, "n": n if view == "head" else None, "dtypes": dtypes}


def kernel_memory() -> int | None:
    """Resident memory of this kernel process in bytes."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory(top: int = 20, known: dict[str, int] | None = None) -> dict[str, Any]:
    """The kernel's resident memory and the largest user variables (sizes in ``known`` not measured)."""
    ns = _user_ns()
    known = known or {}
    sizes = [
        {"name": name, "size_bytes": known[name] if name in known else _size(ns[name]), "type": _type_name(ns[name])}
        for name in user_names(include_modules=False)
    ]
    sizes.sort(key=lambda row: -row["size_bytes"])
    return {
        "kernel_rss_bytes": kernel_memory(),
        "variables_total_bytes": sum(row["size_bytes"] for row in sizes),
        "variables": sizes[:top],
    }


def variable_sizes() -> dict[str, int]:
    """Size in bytes of every user variable (modules left out)."""
    ns = _user_ns()
    return {name: _size(ns[name]) for name in user_names(include_modules=False)}


def source(name: str, max_chars: int = 4000) -> dict[str, Any]:
    """The source of a function or class (or of a bound method, or an instance's class)."""
    import inspect

    obj = _user_value(name)
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj) else type(obj)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError) as exc:
        raise Refused(f"no source available for {name!r} ({_type_name(obj)}): {exc}", name=name) from exc
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... [{len(text) - max_chars} more characters]"
    return {"name": name, "source": text}
