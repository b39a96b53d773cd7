"""The names a cell reads and writes, from its source: how a difference is followed from one step to the next.

`names_read` and `names_written` parse a cell (IPython's ``%magic`` and ``!shell`` lines are
left out first; ``x = !ls`` binds ``x``); a cell that does not parse reads and writes nothing known.
Writes are what a cell binds (assignments, ``for``/``with`` targets, imports, ``def``/``class``, ``del``)
and the names it may change in place (``df['x'] = ...``, ``df.x = ...``, ``model.fit(...)``,
``rows.append(...)``: a method called on a name may change it). Reads are every name loaded anywhere in
the cell.
"""

from __future__ import annotations

import ast
import re

from themisto_env.syntax import parse as parse_python

_MAGIC_LINE = re.compile(r"^(\s*)(?:%|!).*$", re.MULTILINE)
_ASSIGNED_SHELL = re.compile(r"^(\s*)([\w.,\s]+?)\s*=\s*[!%].*$", re.MULTILINE)


def _parse(source: str) -> ast.Module | None:
    if source.lstrip().startswith("%%"):  # a cell magic: its body is not Python
        return None
    text = _ASSIGNED_SHELL.sub(r"\1\2 = None", source)
    text = _MAGIC_LINE.sub(r"\1pass", text)
    try:
        return parse_python(text)
    except (SyntaxError, ValueError):
        return None


def _base(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def names_read(source: str) -> frozenset[str]:
    """Every name the cell loads (anywhere, function bodies included)."""
    tree = _parse(source)
    if tree is None:
        return frozenset()
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


def names_written(source: str, *, in_place: bool = True) -> frozenset[str]:
    """The names the cell binds, and (``in_place``) those it may change in place (see the module doc)."""
    tree = _parse(source)
    if tree is None:
        return frozenset()
    written: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            written.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            written.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            written.update((a.asname or a.name).partition(".")[0] for a in node.names if a.name != "*")
        elif not in_place:
            continue
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            written.add(_base(node) or "")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            written.add(_base(node.func.value) or "")
    written.discard("")
    return frozenset(written)


def names_imported(source: str, *, modules_only: bool = False) -> frozenset[str]:
    """The names the cell binds by ``import`` statements (``import numpy as np`` binds ``np``); with
    ``modules_only``, by ``import x`` only (a module), not ``from x import y`` (anything ``x`` holds)."""
    tree = _parse(source)
    if tree is None:
        return frozenset()
    kinds = (ast.Import,) if modules_only else (ast.Import, ast.ImportFrom)
    return frozenset(
        (a.asname or a.name).partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        for a in node.names
        if a.name != "*"
    )


__all__ = ["names_imported", "names_read", "names_written"]
