"""Reading the observation tools' answers (their text, as an agent sees it) back into facts.

``inspect_variable``, ``list_variables``, ``dataframe_info`` and the dataframe views answer in text; these
functions read that text back, and return None where a tool answered with an error.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass

CUT_MARKER = re.compile(r"\n?\.\.\. \[[\d,]+ more characters\]\s*\Z")
INFO_ROW = re.compile(r"^\s*\d+\s+(?P<column>.+?)\s+\d+ non-null\s+(?P<dtype>\S+)\s*$")


@dataclass(frozen=True)
class Inspection:
    """What an ``inspect_variable`` answer says about a variable.

    Attributes:
        type: The type's name as the tool gives it.
        shape: ``shape (r, c)``'s tuple text, if any.
        length: The length (or the first dimension), if any.
        dtype: The dtype, if any.
        value: The repr, without the tool's cut marker.
    """

    type: str
    shape: str | None
    length: str | None
    dtype: str | None
    value: str


def frame_body(result: str) -> str | None:
    """A dataframe tool's text without its ``name.view():`` title line (None for an error)."""
    if result.startswith("Error:") or "\n" not in result:
        return None
    return CUT_MARKER.sub("", result.split("\n", 1)[1])


def read_inspection(result: str) -> Inspection | None:
    """An ``inspect_variable`` answer read into its parts (None for an error or another layout)."""
    if result.startswith("Error:"):
        return None
    lines = result.split("\n")
    if len(lines) < 3 or ": " not in lines[0] or "value:" not in lines:
        return None
    type_name = lines[0].split(": ", 1)[1]
    facts = lines[1]
    shape = re.search(r"\bshape (\([\d, ]*\))", facts)
    length = re.search(r"\blen (\d+)", facts)
    dtype = re.search(r"\bdtype (\S+)", facts)
    value = "\n".join(lines[lines.index("value:") + 1 :])
    first_dim = re.match(r"\((\d+)", shape.group(1)) if shape else None
    return Inspection(
        type=type_name,
        shape=shape.group(1) if shape else None,
        length=length.group(1) if length else (first_dim.group(1) if first_dim else None),
        dtype=dtype.group(1).rstrip(",") if dtype else None,
        value=CUT_MARKER.sub("", value),
    )


def is_pandas(type_name: str, cls: str) -> bool:
    """Whether a type name is pandas' ``cls`` (``pandas.DataFrame`` in pandas 3, ``pandas.core.frame...``)."""
    return type_name.startswith("pandas.") and type_name.rsplit(".", 1)[-1] == cls


def displayed_class(type_name: str) -> str:
    """How IPython displays a class (``type(x)``): ``int``, ``numpy.float64``, ``__main__.Model``."""
    if "." in type_name or isinstance(getattr(builtins, type_name, None), type):
        return type_name
    return f"__main__.{type_name}"


def dtypes_repr(info_text: str) -> str | None:
    """``df.dtypes`` as a notebook shows it, from ``df.info()``'s column table."""
    import pandas as pd

    rows = [m for line in info_text.split("\n") if (m := INFO_ROW.match(line))]
    if not rows:
        return None
    dtypes = pd.Series([m["dtype"] for m in rows], index=[m["column"] for m in rows], dtype=object)
    return repr(dtypes)


def variable_types(listing: str) -> dict[str, str] | None:
    """Name -> type from ``list_variables``' table (None when the tool failed)."""
    if listing.startswith("Error:"):
        return None
    types = {}
    for line in listing.split("\n")[2:]:
        parts = line.split()
        if len(parts) >= 2:
            types[parts[0]] = parts[1]
    return types


def says_undefined(result: str) -> bool:
    """Whether an ``inspect_variable`` answer says the kernel has no such name."""
    return result.startswith("Error: no variable named")


def info_columns(result: str) -> set[str] | None:
    """The column names in a ``dataframe_info`` answer (None for an error or a summary without them)."""
    body = frame_body(result)
    if body is None:
        return None
    columns = {m["column"] for line in body.split("\n") if (m := INFO_ROW.match(line))}
    return columns or None


__all__ = [
    "CUT_MARKER",
    "INFO_ROW",
    "Inspection",
    "displayed_class",
    "dtypes_repr",
    "frame_body",
    "info_columns",
    "is_pandas",
    "read_inspection",
    "says_undefined",
    "variable_types",
]
