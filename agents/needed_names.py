"""Which names a cell needs from the kernel, and which DataFrame columns it looks up, before running it.

`needed_names` lists, in the order Python evaluates them, the names a cell reads before (or
without) binding them itself: if the kernel lacks one, the cell stops with ``NameError``. Bodies of
functions, lambdas and classes are not evaluated when the cell runs and are skipped; names bound by
assignments, imports, ``for``/``with``/``except`` targets, walrus, comprehensions and ``def``/``class``
count as bound from that point on. Builtins (and IPython's ``display``, ``get_ipython``, ``In``, ``Out``),
names starting with ``_``, and words of IPython magic lines are never needed. A cell with a star import
a ``try`` or a ``match`` is not analysed (it may bind or catch anything): it needs nothing.

`column_lookups` lists ``x['col']`` reads and ``x.pop('col')`` calls on variables the cell has not
touched before them: if the kernel's ``x`` is a DataFrame without that column, the cell stops with
``KeyError: 'col'``.
"""

from __future__ import annotations

import ast
import builtins
import re

from themisto_env.syntax import parse as parse_python

_MAGIC_LINE = re.compile(r"^\s*[%!]")
_IPYTHON_NAMES = frozenset({"display", "get_ipython", "In", "Out", "exit", "quit"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def parse_cell(source: str) -> tuple[ast.Module, set[str]] | None:
    """The cell's syntax tree with IPython magic and shell lines blanked, and the words of those lines.

    Returns:
        The module and the magic lines' words, or None when the cell is not valid Python.
    """
    lines = source.split("\n")
    magic_words = {w for line in lines if _MAGIC_LINE.match(line) for w in re.findall(r"[A-Za-z_]\w*", line)}
    try:
        tree = parse_python("\n".join("" if _MAGIC_LINE.match(line) else line for line in lines))
    except SyntaxError:
        return None
    return tree, magic_words


class _Reads(ast.NodeVisitor):
    """Walks statements in evaluation order, noting names read before they are bound."""

    def __init__(self, bound: set[str]) -> None:
        self.bound = set(bound)
        self.needed: list[str] = []

    def _read(self, name: str) -> None:
        if name not in self.bound and name not in self.needed:
            self.needed.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:
            self.bound.add(node.id)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self._read(node.target.id)
        self.visit(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.visit(item.optional_vars)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            self.bound.add(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        if isinstance(node, ast.ClassDef):
            for expr in [*node.bases, *(k.value for k in node.keywords)]:
                self.visit(expr)
        else:
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                self.visit(default)
        self.bound.add(node.name)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        outer = set(self.bound)
        for generator in node.generators:
            self.visit(generator.iter)
            self.visit(generator.target)
            for condition in generator.ifs:
                self.visit(condition)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.visit(part)
        self.bound = outer  # comprehension variables do not leak

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


def needed_names(source: str) -> list[str]:
    """The names a cell reads from the kernel, in evaluation order (see the module docstring).

    Args:
        source: The cell's source.

    Returns:
        The names; empty for a cell that is not valid Python, has a star import or a ``try``.
    """
    parsed = parse_cell(source)
    if parsed is None:
        return []
    tree, magic_words = parsed
    for node in ast.walk(tree):
        if isinstance(node, ast.Try | ast.TryStar | ast.Match) or (
            isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
        ):
            return []
    reads = _Reads(magic_words)
    for stmt in tree.body:
        reads.visit(stmt)
    return [
        name
        for name in reads.needed
        if not name.startswith("_") and name not in _IPYTHON_NAMES and not hasattr(builtins, name)
    ]


def column_lookups(source: str) -> list[tuple[str, str]]:
    """``(variable, column)`` for each ``x['col']`` read or ``x.pop('col')`` on an untouched variable.

    A variable counts as touched once an earlier statement of the cell mentions it; only lookups in
    the first statement that mentions a variable are listed, in source order.

    Args:
        source: The cell's source.

    Returns:
        The lookups (empty for a cell that is not valid Python).
    """
    parsed = parse_cell(source)
    if parsed is None:
        return []
    lookups: list[tuple[str, str]] = []
    touched: set[str] = set()
    for stmt in parsed[0].body:
        mentioned = {node.id for node in ast.walk(stmt) if isinstance(node, ast.Name)}
        for node in [] if isinstance(stmt, _SCOPES) else _walk_outside_scopes(stmt):
            found = _lookup(node)
            if found is not None and found[0] not in touched and found not in lookups:
                lookups.append(found)
        touched |= mentioned
    return lookups


def _walk_outside_scopes(node: ast.AST) -> list[ast.AST]:
    """Nodes in source order, not entering function, lambda or class bodies."""
    found: list[ast.AST] = []
    for child in ast.iter_child_nodes(node):
        found.append(child)
        if not isinstance(child, _SCOPES):
            found.extend(_walk_outside_scopes(child))
    return found


def _lookup(node: ast.AST) -> tuple[str, str] | None:
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.value.id, node.slice.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "pop"
        and isinstance(node.func.value, ast.Name)
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.func.value.id, node.args[0].value
    return None


__all__ = ["column_lookups", "needed_names", "parse_cell"]
