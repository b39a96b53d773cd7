"""Limits on what comes in from outside: how deep a JSON value may nest, how much of it is echoed back.

Every boundary (JuNE logs, notebooks, results files, actions, tool arguments) reads JSON-like values
written by someone else. Python's ``json`` and every recursive walk over such a value (``repr``, pydantic,
``json.dumps``) raise ``RecursionError`` somewhere near a thousand levels; these helpers check depth and
size without recursing, so that a value outside the limits is refused with one line instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 64
"""How deep a value read from outside may nest (lists and objects). Real notebook outputs nest a few levels."""

ECHO_CHARS = 60
"""How much of a caller's text an error message repeats."""

MAX_NAME_CHARS = 64
"""The longest tool name or argument name an agent may send; longer ones are refused, echoed in part."""

MAX_ARGS_CHARS = 200_000
"""The most characters of a tool call's arguments (a ``try_cell`` cell is the longest argument)."""

MAX_ARGS_DEPTH = 16
"""How deep a tool call's arguments may nest (every tool takes flat arguments)."""

MAX_PREDICTION_CHARS = 1_000_000
"""The longest prediction scored (a cell or an output; the longest targets are a few thousand chars)."""


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """A short prefix of what a caller sent, for an error message: ``'abc...' (10000000 chars)``.

    Args:
        value: The text (or any value; others are shown by type only when their ``repr`` would be long).
        limit: How many characters to repeat at most.

    Returns:
        The ``repr`` of the value when short, else the ``repr`` of a prefix and the full length.
    """
    if not isinstance(value, str):
        if isinstance(value, (int, float, bool)) or value is None:
            text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "a huge integer"
            return text
        return f"a {type(value).__name__}"
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} chars)"


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether a value of lists, tuples and mappings nests deeper than ``limit`` (walked without recursion).

    Args:
        value: The value.
        limit: The deepest nesting allowed (a scalar is depth 0, ``[1]`` depth 1).

    Returns:
        True when some element sits deeper than ``limit``.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def size_exceeds(value: Any, limit: int) -> bool:
    """Whether a JSON-like value holds more than ``limit`` characters of text (keys and strings; 8 for any
    other scalar), counted without recursion and stopping as soon as the limit is passed.

    Args:
        value: The value (nesting is bounded separately by `depth_exceeds`).
        limit: The most characters allowed.
    """
    total = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            for key, child in item.items():
                total += len(key) if isinstance(key, str) else 8
                stack.append(child)
        elif isinstance(item, (list, tuple)):
            total += 2
            stack.extend(item)
        else:
            total += 8
        if total > limit:
            return True
    return False


def load_json(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON read from outside, refusing a value nested deeper than ``max_depth``.

    Args:
        text: The JSON text.
        max_depth: The deepest nesting allowed.

    Returns:
        The value.

    Raises:
        ValueError: The text is not JSON, or nests too deep (the message says which, in a few words).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    if depth_exceeds(value, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return value


__all__ = [
    "ECHO_CHARS",
    "MAX_ARGS_CHARS",
    "MAX_ARGS_DEPTH",
    "MAX_DEPTH",
    "MAX_NAME_CHARS",
    "MAX_PREDICTION_CHARS",
    "depth_exceeds",
    "echo",
    "load_json",
    "size_exceeds",
]
