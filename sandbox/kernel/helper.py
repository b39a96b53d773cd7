"""Helper code that runs *inside* the kernel, injected as source at kernel start.

It is installed as the module ``_themisto_helper`` in the kernel's ``sys.modules`` without binding any
name in the user namespace, and is called through ``user_expressions`` of a silent execute request, so
that introspection leaves the user's namespace, ``_``, ``Out`` and the execution counter untouched.
Every public function takes JSON-able keyword arguments and returns a JSON-able value; :func:`call`
dispatches by name and returns a JSON string. A function declines with :class:`Refused` (no such
variable, not a DataFrame, ...); the host raises ``UnknownNameError`` or ``IntrospectionRefused`` for it.
The host's models of the answers are in ``themisto_env.sandbox.kernel.answers``.

This file must stay self-contained (standard library; numpy, pandas and dill only when present) because
the kernel may run in a container where themisto_env is not installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
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
    """The user variable ``name``; :class:`Refused` with the nearest names when there is none."""
    ns = _user_ns()
    if name in ns and name in user_names():
        return ns[name]
    import difflib

    near = difflib.get_close_matches(name, user_names(), n=3)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    raise Refused(f"no variable named {name!r} in the kernel.{hint}", name=name, suggestions=near)


def _size(obj: Any) -> int:
    """:func:`_deep_size`, or 0 where the object's own methods raise (one odd object spoils no listing)."""
    try:
        return _deep_size(obj)
    except Exception:
        return 0


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
    n = max(1, min(int(n), 50))
    if view == "head":
        text = obj.head(n).to_string()
    elif view == "describe":
        text = obj.describe().to_string()
    elif view == "info":
        buf = io.StringIO()
        if isinstance(obj, pd.DataFrame):
            obj.info(buf=buf)
        else:
            obj.to_frame().info(buf=buf)
        text = buf.getvalue()
    else:
        raise Refused(f"unknown view {view!r}: use 'head', 'info' or 'describe'.", name=name)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... [{len(text) - max_chars} more characters]"
    return {"name": name, "view": view, "text": text}


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


def _stable_dumps(obj: Any) -> bytes:
    """``dill.dumps`` (file contents kept, ``recurse=False``) with the bytes made the same in every process
    where a library keys its state by ``id()``: matplotlib's transforms keep their parents in a dict keyed
    by the parents' ids (addresses) and pickle it so; here its keys are numbered in order instead (its own
    unpickling makes the same weak references of them, and only ever uses the keys to drop dead ones)."""
    import copyreg

    import dill

    transforms = sys.modules.get("matplotlib.transforms")
    node = getattr(transforms, "TransformNode", None)

    class StablePickler(dill.Pickler):  # type: ignore[misc]
        def reducer_override(self, obj: Any) -> Any:
            if node is not None and isinstance(obj, node) and hasattr(obj, "__getstate__"):
                state = obj.__getstate__()
                if isinstance(state, dict) and isinstance(state.get("_parents"), dict):
                    state["_parents"] = dict(enumerate(state["_parents"].values()))
                    return (copyreg.__newobj__, (type(obj),), state)
            return NotImplemented

    buffer = io.BytesIO()
    StablePickler(buffer, None, byref=None, fmode=dill.FILE_FMODE, recurse=False).dump(obj)
    return buffer.getvalue()


def snapshot(store: str) -> dict[str, Any]:
    """Save the user namespace with dill to ``<store>/<sha[:2]>/<sha>.dill``; unpicklable names skipped.

    ``store`` is the kernel's own outbox: the host checks the file's hash and moves it into the store
    (so a partial file from a failed write is never taken in). Open files are saved with their
    contents and position (dill's FILE_FMODE), so they come back even in a fresh kernel whose working
    directory does not hold the file.
    """
    import dill

    ns = _user_ns()
    names = user_names()
    state = {name: ns[name] for name in names}
    skipped: dict[str, str] = {}
    options = _display_options()
    if options:
        try:
            dill.dumps(options, recurse=False)
            state[OPTIONS_KEY] = options
        except Exception as exc:  # left out: the state check then shows the difference
            skipped[OPTIONS_KEY] = f"{type(exc).__name__}: {str(exc)[:200]}"
    try:
        data = _stable_dumps(state)
    except Exception:
        for name in names:
            try:
                _stable_dumps(state[name])
            except Exception as exc:
                skipped[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        for name in skipped:
            state.pop(name, None)
        data = _stable_dumps(state)
    digest = hashlib.sha256(data).hexdigest()
    folder = os.path.join(store, digest[:2])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, digest + ".dill"), "wb") as f:
        f.write(data)
    return {"digest": digest, "size_bytes": len(data), "names": sorted(set(state) - {OPTIONS_KEY}), "skipped": skipped}


def restore(path: str, digest: str, clean: bool = True, keep: list[str] | None = None) -> dict[str, Any]:
    """Load a snapshot into the user namespace, after checking that its bytes hash to ``digest``.

    The bytes are read once, hashed and loaded from memory, so what is checked is what is loaded. With
    ``clean``, user names not in the snapshot are removed first, except those in ``keep`` (names the
    snapshot could not hold, rebuilt by replay).
    """
    import dill

    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        return {"corrupt": f"content hash {hashlib.sha256(data).hexdigest()[:12]} does not match its name"}
    state = dill.loads(data)
    if not isinstance(state, dict):
        return {"corrupt": f"holds a {type(state).__name__}, not a namespace"}
    set_display_options(state.pop(OPTIONS_KEY, {}))
    ns = _user_ns()
    if clean:
        kept = set(keep or ())
        for name in user_names():
            if name not in state and name not in kept:
                del ns[name]
    ns.update(state)
    return {"names": sorted(state), "fingerprint": namespace_fingerprint()}


#: Changes whenever the fingerprint of some value would change: recorded fingerprints of another version
#: are not compared (the dataset must be rebuilt to be checked).
FINGERPRINT_VERSION = 4  # 4: fitted models (parameters, fitted attributes) and matplotlib figures by content
#: Arrays and frames up to this size are hashed whole; larger ones on an evenly strided sample of about
#: this many bytes (with their shape), so a fingerprint stays cheap whatever the data's size.
FINGERPRINT_FULL_BYTES = 64 * 1024
#: Strings and bytes longer than this are fingerprinted by length only.
FINGERPRINT_MAX_TEXT = 1 << 20
_ADDRESS = __import__("re").compile(r" at 0x[0-9a-fA-F]+")


def _array_digest(array: Any, h: Any) -> bool:
    """Hash a numpy array of a non-object dtype (whole, or an evenly strided sample when large, taken
    without copying the rest); False for object arrays."""
    np = sys.modules["numpy"]
    if array.dtype.hasobject:
        return False
    h.update(f"{array.dtype.str}{array.shape}".encode())
    if array.nbytes > FINGERPRINT_FULL_BYTES:
        array = array.flat[:: max(1, array.nbytes // FINGERPRINT_FULL_BYTES)]
    h.update(np.ascontiguousarray(array).view(np.uint8).data)
    return True


#: Values that are not plain numbers (strings, objects) are hashed on at most about this many elements.
FINGERPRINT_SAMPLE_ITEMS = 1024


#: What ``pandas.api.types.infer_dtype`` may say of object values that are hashed (their ``str`` is
#: their content); other objects (user classes, whose ``str`` may hold addresses) are not hashed.
_PLAIN_VALUES = frozenset(
    {"string", "bytes", "integer", "floating", "mixed-integer-float", "boolean", "empty", "decimal", "complex"}
)


def _values_digest(values: Any, h: Any) -> bool:
    """Hash a pandas column's or index's values: numbers and datetimes as arrays, categoricals as codes
    and categories, plain objects (strings, ...) on a strided sample by pandas' own hashing."""
    np = sys.modules["numpy"]
    pd = sys.modules["pandas"]
    if isinstance(values, pd.Categorical):
        return _index_digest(values.categories, h) and _array_digest(np.asarray(values.codes), h)
    backing = getattr(values, "_ndarray", None)  # DatetimeArray, TimedeltaArray, NumpyExtensionArray
    if isinstance(backing, np.ndarray) and not backing.dtype.hasobject:
        values = backing
    if isinstance(values, np.ndarray) and not values.dtype.hasobject:
        return _array_digest(values, h)
    count = len(values)
    if count > FINGERPRINT_SAMPLE_ITEMS:
        values = values[:: -(-count // FINGERPRINT_SAMPLE_ITEMS)]
    sample = np.asarray(values, dtype=object).reshape(-1)
    if pd.api.types.infer_dtype(sample, skipna=True) not in _PLAIN_VALUES:
        return False
    h.update(f"{getattr(values, 'dtype', '')}{count}".encode())
    h.update(pd.util.hash_array(sample).data)
    return True


def _index_digest(index: Any, h: Any) -> bool:
    pd = sys.modules["pandas"]
    if isinstance(index, pd.RangeIndex):
        h.update(f"range{index.start},{index.stop},{index.step}".encode())
        return True
    h.update(f"{type(index).__name__}{index.dtype}{len(index)}".encode())
    if isinstance(index, pd.MultiIndex):  # levels and codes: never builds (and caches) its tuples
        return all(_index_digest(level, h) for level in index.levels) and all(
            _array_digest(codes, h) for codes in index.codes
        )
    return _values_digest(index.array, h)


def _frame_digest(obj: Any, h: Any) -> bool:
    """Hash a DataFrame or Series: names, dtypes, index and values, column by column in column order
    (the same however pandas laid the columns out in blocks)."""
    pd = sys.modules["pandas"]
    if isinstance(obj, pd.Index):
        return _index_digest(obj, h)
    if isinstance(obj, pd.Series):
        h.update(f"{obj.name!r}{obj.dtype}".encode())
        return _index_digest(obj.index, h) and _values_digest(obj.array, h)
    h.update(repr(obj.columns.tolist()).encode())
    if not _index_digest(obj.index, h):
        return False
    digests: list[bytes | None] = [None] * obj.shape[1]
    blocks = getattr(getattr(obj, "_mgr", None), "blocks", None)
    for block in blocks or ():  # pandas' blocks, each column hashed on its own
        values = block.values
        for j, position in enumerate(block.mgr_locs.as_array):
            column = values[j] if getattr(values, "ndim", 1) == 2 else values
            sub = hashlib.sha1(str(block.dtype).encode())
            if not _values_digest(column, sub):
                return False
            digests[position] = sub.digest()
    for position, digest in enumerate(digests):  # another pandas (or none filled): column by column
        if digest is None:
            column = obj.iloc[:, position]
            sub = hashlib.sha1(str(column.dtype).encode())
            if not _values_digest(column.array, sub):
                return False
            digests[position] = sub.digest()
    h.update(b"".join(d for d in digests if d is not None))
    return True


def _code_digest(code: Any, h: Any) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, h)
        else:
            h.update(_ADDRESS.sub("", repr(const)).encode("utf-8", "surrogatepass"))


def _content(obj: Any, h: Any, depth: int = 0) -> bool:
    """Feed a deterministic digest of ``obj``'s content into ``h``; False where that is not cheap."""
    np = sys.modules.get("numpy")
    pd = sys.modules.get("pandas")
    if obj is None or isinstance(obj, (bool, int, float, complex)) or (np is not None and isinstance(obj, np.generic)):
        h.update(repr(obj).encode())
        return True
    if isinstance(obj, str):
        if len(obj) > FINGERPRINT_MAX_TEXT:
            return False
        h.update(obj.encode("utf-8", "surrogatepass"))
        return True
    if isinstance(obj, (bytes, bytearray)):
        if len(obj) > FINGERPRINT_MAX_TEXT:
            return False
        h.update(obj)
        return True
    if np is not None and isinstance(obj, np.ndarray):
        return _array_digest(obj, h)
    if pd is not None and isinstance(obj, (pd.DataFrame, pd.Series, pd.Index)):
        try:
            return _frame_digest(obj, h)
        except Exception:  # unhashable cells (lists, dicts), an unusual pandas: shape and type only
            return False
    if depth > 3:
        return False
    if isinstance(obj, (list, tuple)):
        if len(obj) > 10_000:
            return False
        h.update(f"{type(obj).__name__}{len(obj)}[".encode())
        return all(_content(item, h, depth + 1) for item in obj)
    if isinstance(obj, dict):
        if len(obj) > 10_000:
            return False
        h.update(f"dict{len(obj)}{{".encode())
        return all(_content(k, h, depth + 1) and _content(v, h, depth + 1) for k, v in obj.items())
    if isinstance(obj, (set, frozenset)):
        if len(obj) > 10_000:
            return False
        parts = []
        for item in obj:
            sub = hashlib.sha1()
            if not _content(item, sub, depth + 1):
                return False
            parts.append(sub.digest()[:8])
        h.update(b"set" + b"".join(sorted(parts)))
        return True
    if isinstance(obj, types.FunctionType):
        _code_digest(obj.__code__, h)
        bound = [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).items()]
        for cell in obj.__closure__ or ():
            try:
                bound.append(cell.cell_contents)
            except ValueError:  # an empty cell
                bound.append(None)
        return _content(tuple(bound), h, depth + 1) if bound else True
    if isinstance(obj, types.ModuleType):
        h.update(obj.__name__.encode())
        return True
    if _is_estimator(obj):
        return _estimator_digest(obj, h, depth)
    if _matplotlib_kind(obj) is not None:
        try:
            return _figure_digest(obj, h)
        except Exception:  # an unusual artist or matplotlib: type and size only
            return False
    return False


def _is_estimator(obj: Any) -> bool:
    """A scikit-learn-style estimator: its class has ``get_params`` and ``fit`` (looked up on the class,
    never running a user's ``__getattr__``)."""
    cls = type(obj)
    return callable(getattr(cls, "get_params", None)) and callable(getattr(cls, "fit", None))


def _estimator_digest(obj: Any, h: Any, depth: int) -> bool:
    """A fitted model's parameters and its fitted attributes (public names ending in ``_``): two models of
    the same class differ when fitted on other data, not only when built with other parameters."""
    try:
        params = obj.get_params(deep=False)
    except Exception:
        return False
    fitted = {k: v for k, v in sorted(vars(obj).items()) if k.endswith("_") and not k.startswith("_")}
    h.update(f"estimator{len(params)},{len(fitted)}".encode())
    return _content(params, h, depth + 1) and _content(fitted, h, depth + 1)


def _matplotlib_kind(obj: Any) -> str | None:
    """``figure`` or ``axes`` for matplotlib's Figure and Axes (by module, without importing matplotlib)."""
    module = type(obj).__module__ or ""
    if not module.startswith("matplotlib."):
        return None
    names = {cls.__name__ for cls in type(obj).__mro__}
    return "figure" if "Figure" in names else "axes" if "Axes" in names else None


def _figure_digest(obj: Any, h: Any) -> bool:
    """A figure (its size, dpi and axes) or one axes, by what it draws: titles, labels, limits, lines' data,
    bars, scatter offsets and images."""
    np = sys.modules["numpy"]
    if _matplotlib_kind(obj) == "figure":
        h.update(f"figure{tuple(obj.get_size_inches())}{obj.dpi}{len(obj.axes)}".encode())
        axes = list(obj.axes)
    else:
        axes = [obj]
    for ax in axes:
        labels = (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), tuple(ax.get_xlim()), tuple(ax.get_ylim()))
        h.update(repr(labels).encode())
        h.update(f"lines{len(ax.lines)}patches{len(ax.patches)}collections{len(ax.collections)}".encode())
        for line in ax.lines:
            _array_digest(np.asarray(line.get_xydata(), dtype=float), h)
        for patch in ax.patches:
            h.update(repr(tuple(round(v, 9) for v in patch.get_bbox().bounds)).encode())
        for collection in ax.collections:
            _array_digest(np.asarray(collection.get_offsets(), dtype=float), h)
        for image in ax.images:
            _array_digest(np.asarray(image.get_array()), h)
        h.update(repr([t.get_text() for t in ax.texts]).encode())
    return True


_SIZED = (str, bytes, bytearray, list, tuple, dict, set, frozenset, range)


def _fingerprint(obj: Any) -> str:
    shape = _shape(obj)
    size = "x".join(map(str, shape)) if shape is not None else ""
    if shape is None and isinstance(obj, _SIZED):  # never a user's __len__ (it may compute anything)
        size = f"len{len(obj)}"
    h = hashlib.sha1()
    try:
        content = h.hexdigest()[:16] if _content(obj, h) else ""
    except Exception:
        content = ""
    return f"{_type_name(obj)}|{size}|{content}"


def value_fingerprint(obj: Any) -> str:
    """One value's fingerprint entry, as :func:`namespace_fingerprint` gives it (the host computes the
    entries of the canaries it plants with it)."""
    return _fingerprint(obj)


#: numpy's default print options (those a cell may change; others are ignored).
_NUMPY_PRINT_DEFAULTS = {
    "edgeitems": 3,
    "threshold": 1000,
    "floatmode": "maxprec",
    "precision": 8,
    "suppress": False,
    "linewidth": 75,
    "nanstr": "nan",
    "infstr": "inf",
    "sign": "-",
    "formatter": None,
}


#: Where a snapshot keeps the display options, and the fingerprint's entry for them (not a Python name:
#: never a user's variable). Restores set them; they change what tools and outputs print.
OPTIONS_KEY = "<display options>"


def _display_options() -> dict[str, dict[str, Any]]:
    """The display options of pandas and numpy that differ from their defaults."""
    options: dict[str, dict[str, Any]] = {}
    pd = sys.modules.get("pandas")
    registered = getattr(getattr(getattr(pd, "_config", None), "config", None), "_registered_options", None)
    if pd is not None and isinstance(registered, dict):
        for key in sorted(k for k in registered if k.startswith("display.")):
            with contextlib.suppress(Exception):
                value = pd.get_option(key)
                if value != registered[key].defval:
                    options.setdefault("pandas", {})[key] = value
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            printing = np.get_printoptions()
            changed = {k: printing[k] for k, v in _NUMPY_PRINT_DEFAULTS.items() if k in printing and printing[k] != v}
            if changed:
                options["numpy"] = changed
    return options


def set_display_options(options: dict[str, dict[str, Any]]) -> None:
    """Make the display options exactly these (the rest at their defaults), where the module is loaded
    or named in ``options``."""
    if "pandas" in options or "pandas" in sys.modules:
        import pandas as pd

        registered = pd._config.config._registered_options
        for key in [k for k in registered if k.startswith("display.")]:
            want = options.get("pandas", {}).get(key, registered[key].defval)
            with contextlib.suppress(Exception):
                if pd.get_option(key) != want:
                    pd.set_option(key, want)
    if "numpy" in options or "numpy" in sys.modules:
        import numpy as np

        with contextlib.suppress(Exception):
            np.set_printoptions(**{**_NUMPY_PRINT_DEFAULTS, **options.get("numpy", {})})


def _ambient() -> str | None:
    """A digest of the display options a cell changed from their defaults (pandas, numpy), or None
    where none is: they change the text of tools and outputs."""
    options = _display_options()
    if not options:
        return None
    text = repr(sorted((module, sorted(values.items())) for module, values in options.items()))
    return f"options|len{sum(map(len, options.values()))}|{hashlib.sha1(text.encode()).hexdigest()[:16]}"


def namespace_fingerprint() -> dict[str, str]:
    """A cheap, deterministic summary of the user namespace: per name ``type|shape-or-length|content``.

    The content part is a hash of the value where that is cheap (numbers, strings, numpy arrays and
    pandas objects, whole up to 64 KiB and on a strided sample above, small containers of those,
    functions' code, modules' names) and empty elsewhere (other objects: type and length only); and one
    entry, :data:`OPTIONS_KEY`, for the display options of pandas and numpy. Two kernels in the same state
    give the same fingerprint, in any process.
    """
    ns = _user_ns()
    fingerprint = {name: _fingerprint(ns[name]) for name in sorted(user_names())}
    ambient = _ambient()
    if ambient is not None:
        fingerprint[OPTIONS_KEY] = ambient
    return fingerprint


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
    compiler = sys.modules.get("ipykernel.compiler")
    if compiler is None or not hasattr(compiler, "get_tmp_directory"):
        return False
    compiler.get_tmp_directory = lambda: CELL_FOLDER
    return True


#: The global random generators' states kept by :func:`keep_random_state`, by key (in this module, not
#: the user's namespace; a restart forgets them).
_RANDOM_STATES: dict[str, dict[str, Any]] = {}


def keep_random_state(key: str) -> list[str]:
    """Keep the states of the global random generators (``random``'s, and numpy's legacy ``np.random``
    where numpy is imported) under ``key``, so that :func:`put_back_random_state` can rewind them (a cell
    replayed a second time after the session seeded them draws what it drew the first time). Returns the
    generators kept."""
    import random

    states: dict[str, Any] = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            states["numpy"] = np.random.get_state()
    _RANDOM_STATES[key] = states
    return sorted(states)


def put_back_random_state(key: str) -> list[str]:
    """Rewind the global random generators to what :func:`keep_random_state` kept under ``key``; returns
    those rewound (none for an unknown key)."""
    import random

    states = _RANDOM_STATES.get(key, {})
    done = []
    if "random" in states:
        random.setstate(states["random"])
        done.append("random")
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in states:
        with contextlib.suppress(Exception):
            np.random.set_state(states["numpy"])
            done.append("numpy")
    return done


def shuffle_random_state() -> list[str]:
    """Seed the global random generators (``random``'s, numpy's legacy ``np.random``) from the system's
    entropy, as a new process would have them: unseeded draws then differ from the last run's."""
    import random

    random.seed()
    done = ["random"]
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            np.random.seed()
            done.append("numpy")
    return done


#: Seeds at or above this are taken for the system's entropy (numpy's ``SeedSequence()`` draws 128 bits):
#: a generator made with no seed holds one; a seed a person typed (``default_rng(42)``) is smaller.
_DRAWN_ENTROPY = 2**64


def _unseeded(obj: Any, np: Any) -> bool:
    """Whether ``obj`` is a numpy ``Generator`` or ``RandomState`` seeded from the system's entropy (made with
    no seed): its ``SeedSequence`` holds 128 drawn bits. ``RandomState(7)`` and ``np.random.seed`` seed the
    legacy way and keep no sequence."""
    if isinstance(obj, np.random.Generator):
        bits = obj.bit_generator
    elif isinstance(obj, np.random.RandomState):
        bits = getattr(obj, "_bit_generator", None)
    else:
        return False
    entropy = getattr(getattr(bits, "seed_seq", None), "entropy", None)
    return isinstance(entropy, int) and entropy >= _DRAWN_ENTROPY


def reseed_generators() -> list[str]:
    """Reseed from the system's entropy the numpy generators of the user namespace that were made with no
    seed (:func:`_unseeded`), as another run of the cell that made them would have them; one level into
    dicts, lists, tuples and objects' attributes too. Returns where they were (``rng``, ``gens['a']``)."""
    np = sys.modules.get("numpy")
    if np is None:
        return []
    found: list[tuple[str, Any]] = []
    ns = _user_ns()
    for name in user_names(include_modules=False):
        value = ns[name]
        found.append((name, value))
        with contextlib.suppress(Exception):  # an object whose attributes cannot be listed: itself only
            if isinstance(value, dict):
                found.extend((f"{name}[{k!r}]", v) for k, v in list(value.items())[:1000])
            elif isinstance(value, (list, tuple)):
                found.extend((f"{name}[{i}]", v) for i, v in enumerate(value[:1000]))
            elif not isinstance(value, type) and isinstance(vars(value), dict):
                found.extend((f"{name}.{k}", v) for k, v in list(vars(value).items())[:1000])
    done = []
    for where, value in found:
        with contextlib.suppress(Exception):
            if not _unseeded(value, np):
                continue
            if isinstance(value, np.random.RandomState):
                value.set_state(np.random.RandomState().get_state())
            else:
                value.bit_generator.state = type(value.bit_generator)().state
            done.append(where)
    return done


#: The process state before the latest step, kept by :func:`keep_process_state` (one at a time).
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
    (:func:`keep_random_state`). Returns True."""
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
    """Undo, as far as a cell run again can tell, what the cell changed since :func:`keep_process_state`:
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
        warnings._filters_mutated()  # type: ignore[attr-defined]
    with contextlib.suppress(OSError):  # a cell that ran `%cd data` runs it again from where it was
        os.chdir(state["cwd"])
    return {"extensions": unloaded, "modules": forgotten}


def install() -> bool:
    """Make ``get_ipython`` a builtin outside cells too (IPython provides it only while a cell runs), and
    give cells file names that do not depend on the kernel's process (:func:`stable_cell_names`).

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


#: The source this module was installed from (set by the host at install time; :func:`seal` copies it).
SOURCE = ""
#: Sealed copies of this module, by random token (see :func:`seal`).
SEALED: dict[str, dict[str, Any]] = {}


def seal() -> str:
    """Make a private copy of this module for measuring what later code does; return its token.

    The copy is compiled from :data:`SOURCE` into a namespace of its own, with a copy of the builtins as
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
    exec(compile(SOURCE, "<themisto-sealed>", "exec"), private)
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
        user_names,
        preload,
        seal,
        install,
        keep_random_state,
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
