"""Fingerprints of values and of the user namespace: cheap, deterministic, the same in every process.

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import hashlib
import sys
import types
from typing import Any

from themisto_env.sandbox.compat.in_kernel import pandas_backing_array, pandas_blocks
from themisto_env.sandbox.kernel.helper._display import OPTIONS_KEY, _display_options
from themisto_env.sandbox.kernel.helper._namespace import _shape, _type_name, _user_ns, user_names

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
    backing = pandas_backing_array(values)
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
    blocks = pandas_blocks(obj)
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
    """One value's fingerprint entry, as `namespace_fingerprint` gives it (the host computes the
    entries of the canaries it plants with it)."""
    return _fingerprint(obj)


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
    entry, `OPTIONS_KEY`, for the display options of pandas and numpy. Two kernels in the same state
    give the same fingerprint, in any process.
    """
    ns = _user_ns()
    fingerprint = {name: _fingerprint(ns[name]) for name in sorted(user_names())}
    ambient = _ambient()
    if ambient is not None:
        fingerprint[OPTIONS_KEY] = ambient
    return fingerprint
