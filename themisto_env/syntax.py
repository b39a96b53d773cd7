"""Python's `ast.parse`, safe to call from many threads at once.

CPython 3.11 keeps the counter that guards the conversion of a parsed tree into Python objects in the
interpreter, not the thread: two threads parsing at once can trip it, and `ast.parse` then raises
`SystemError: AST constructor recursion depth mismatch` (CPython gh-106905; seen here under `themisto serve`'s
load test). A server answering many
sessions on threads parses cells concurrently (tool answers, metrics, cell names), so every parse in the
package goes through [parse][themisto_env.syntax.parse], one at a time.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_lock = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source)`, one thread at a time (a lock costs far less than the parse).

    Raises:
        SyntaxError: As `ast.parse` does (also ValueError for a NUL byte).
    """
    with _lock:
        return ast.parse(source, filename)
