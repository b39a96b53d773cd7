"""Finding the most recent definition of a function or class in the execution history.

The kernel loses the source lines of functions and classes restored from a snapshot into a fresh kernel
(``inspect.getsource`` reads them from IPython's cell cache, which the snapshot does not hold), so
``get_source`` falls back to the cells the user ran.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from themisto_env.env.tools._models import HistoryItem
from themisto_env.syntax import parse as parse_python

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Definition:
    """A ``def``/``class`` statement found in the history.

    Attributes:
        index: The index of the execution that holds it.
        source: The statement's source, decorators included.
    """

    index: int
    source: str


def find_definition(name: str, history: Sequence[HistoryItem]) -> Definition | None:
    """The most recent ``def name``/``async def name``/``class name`` executed, or None.

    Definitions nested in a function or class body are not candidates; those under ``if``, ``try``,
    ``with`` and loops are. Cells that are not plain Python (IPython magics, shell escapes) are
    parsed with those lines blanked, and searched by indentation when they still do not parse.

    Args:
        name: The function's or class's name.
        history: The executions so far, oldest first.

    Returns:
        The last definition in the most recent execution that defines ``name``.
    """
    for item in reversed(history):
        if name not in item.source:
            continue
        source = _definition_in(name, item.source)
        if source is not None:
            return Definition(index=item.index, source=source)
    return None


def _definition_in(name: str, cell: str) -> str | None:
    lines = cell.splitlines()
    python = "\n".join("" if _is_ipython_line(line) else line for line in lines)
    try:
        tree = parse_python(python)
    except SyntaxError:
        return _definition_by_indentation(name, lines)
    found = [node for node in _outer_statements(tree.body) if node.name == name]
    if not found:
        return None
    node = found[-1]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    return "\n".join(lines[start - 1 : end])


_IPYTHON_LINE = re.compile(
    r"^\s*(?:[%!]"  # magics and shell escapes: %time, %%capture, !pip
    r"|\??[\w.]+\?{1,2}\s*$"  # help: obj?, obj??, ?obj
    r"|[\w.]+(?:\s*,\s*[\w.]+)*\s*=\s*[%!])"  # assignment from a magic or the shell: x = !ls
)


def _is_ipython_line(line: str) -> bool:
    return _IPYTHON_LINE.match(line) is not None


def _outer_statements(body: Sequence[ast.stmt]) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """Definitions in ``body`` and in the blocks of its compound statements, in order of appearance."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = []
    for stmt in body:
        if isinstance(stmt, _DEFINITIONS):
            found.append(stmt)
            continue
        for block in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, block, None)
            if isinstance(inner, list):
                found.extend(_outer_statements(inner))
        for handler in getattr(stmt, "handlers", []):
            found.extend(_outer_statements(handler.body))
        for case in getattr(stmt, "cases", []):
            found.extend(_outer_statements(case.body))
    found.sort(key=lambda node: node.lineno)
    return found


def _definition_by_indentation(name: str, lines: list[str]) -> str | None:
    """The last top-level definition of ``name``: its header, decorators, and the indented lines below."""
    header = re.compile(rf"(?:async\s+def|def|class)\s+{re.escape(name)}\b")
    starts = [i for i, line in enumerate(lines) if header.match(line)]
    if not starts:
        return None
    first = last = starts[-1]
    while first > 0 and lines[first - 1].startswith("@"):
        first -= 1
    for i in range(last + 1, len(lines)):
        if lines[i].strip() and not lines[i][0].isspace():
            break
        last = i
    while last > first and not lines[last].strip():
        last -= 1
    return "\n".join(lines[first : last + 1])
