"""What a cell ends by displaying, in a form an observation tool can answer (``runtime-rules``' table).

`displayed_expression` recognises ``x``, ``x.shape``, ``len(x)``, ``type(x)``, ``x.head(n)``,
``x.describe()``, ``x.info()``, ``x.dtypes`` and tuples of the first four, of a variable the cell does not
mention earlier (so the kernel's value is the one displayed).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Literal

from themisto_env.agents.needed_names import parse_cell

DisplayKind = Literal["value", "shape", "len", "type", "head", "describe", "info", "dtypes", "tuple"]

SCALAR_KINDS: frozenset[str] = frozenset({"value", "shape", "len", "type"})
"""The kinds answered from one ``inspect_variable`` call (a tuple may hold only these)."""


@dataclass(frozen=True)
class DisplayedExpression:
    """What a cell's last line displays, in a form a tool can answer.

    Attributes:
        kind: Which expression of the variable (see the module docstring's table), or ``tuple``.
        name: The variable ("" for a tuple).
        n: The row count of ``head``.
        parts: A tuple's elements (each a ``value``, ``shape``, ``len`` or ``type`` of a variable).
    """

    kind: DisplayKind
    name: str
    n: int = 5
    parts: tuple[DisplayedExpression, ...] = ()


def displayed_expression(cell: str) -> DisplayedExpression | None:
    """The expression a cell ends by displaying, when a tool can answer it.

    Args:
        cell: The cell's source (IPython magic and shell lines are ignored).

    Returns:
        The expression, or None when the cell does not end with one of the supported expressions of a
        variable untouched earlier in the cell, or when the display is suppressed by a ``;``.
    """
    if cell.rstrip().endswith(";"):
        return None
    parsed = parse_cell(cell)
    if parsed is None:
        return None
    tree = parsed[0]
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    found = _classify(tree.body[-1].value)
    if found is None:
        return None
    names = {part.name for part in found.parts} if found.kind == "tuple" else {found.name}
    earlier = ast.Module(body=tree.body[:-1], type_ignores=[])
    if any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(earlier)):
        return None
    return found


def _classify(expr: ast.expr) -> DisplayedExpression | None:
    if isinstance(expr, ast.Tuple) and expr.elts:
        parts = tuple(_classify(element) for element in expr.elts)
        if all(p is not None and p.kind in SCALAR_KINDS for p in parts):
            return DisplayedExpression("tuple", "", parts=parts)  # type: ignore[arg-type]
        return None
    if isinstance(expr, ast.Name):
        return DisplayedExpression("value", expr.id)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        if expr.attr in ("shape", "dtypes"):
            return DisplayedExpression(expr.attr, expr.value.id)  # type: ignore[arg-type]
        return None
    if not isinstance(expr, ast.Call):
        return None
    func, args, keywords = expr.func, expr.args, expr.keywords
    if isinstance(func, ast.Name) and func.id in ("len", "type") and len(args) == 1 and not keywords:
        if isinstance(args[0], ast.Name):
            return DisplayedExpression(func.id, args[0].id)  # type: ignore[arg-type]
        return None
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    name = func.value.id
    if func.attr in ("describe", "info") and not args and not keywords:
        return DisplayedExpression(func.attr, name)  # type: ignore[arg-type]
    if func.attr == "head":
        values = [*args, *(k.value for k in keywords if k.arg == "n")]
        if len(values) > 1 or len(keywords) > (0 if args else 1):
            return None
        if not values:
            return DisplayedExpression("head", name)
        value = values[0]
        if isinstance(value, ast.Constant) and isinstance(value.value, int) and 1 <= value.value <= 50:
            return DisplayedExpression("head", name, value.value)
    return None


def is_pandas(type_name: str, cls: str) -> bool:
    """Whether a type name is pandas' ``cls`` (``pandas.DataFrame`` in pandas 3, ``pandas.core.frame...``)."""
    return type_name.startswith("pandas.") and type_name.rsplit(".", 1)[-1] == cls


def displayed_class(type_name: str) -> str:
    """How IPython displays a class (``type(x)``): ``int``, ``numpy.float64``, ``__main__.Model``."""
    if "." in type_name or isinstance(getattr(builtins, type_name, None), type):
        return type_name
    return f"__main__.{type_name}"


__all__ = [
    "SCALAR_KINDS",
    "DisplayKind",
    "DisplayedExpression",
    "displayed_class",
    "displayed_expression",
    "is_pandas",
]
