"""The ``full`` observation's runtime dump read back into variables, and what they answer.

The env writes one line per user variable (``name: type shape=(r, c) (N bytes) = repr``, the repr cut to a
few hundred characters with its newlines made spaces; `themisto_env.env.observation.render_runtime`).
`read_dump` reads those lines back; `dump_answer` answers a displayed expression (``x``, ``x.shape``,
``len(x)``, ``type(x)``, tuples of them) from them when the dump holds what it needs, else None.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from themisto_env.agents.displayed import DisplayedExpression, displayed_class

_LINE = re.compile(
    r"^(?P<name>[A-Za-z_]\w*): (?P<type>\S+)(?: shape=(?P<shape>\([\d, ]*\)))?"
    r" \((?P<size>[\d,]+) bytes\) = (?P<repr>.*)$"
)
#: The dump cuts each repr to this many characters (`render_runtime`'s ``per_variable_chars``).
DUMP_REPR_CHARS = 300


@dataclass(frozen=True)
class DumpedVariable:
    """One variable of the runtime dump.

    Attributes:
        name: Its name.
        type: Its type, as the dump gives it.
        shape: The shape of arrays and frames, as text (``(178, 13)``), if shown.
        repr: Its repr as the dump shows it (one line, maybe cut).
        whole: Whether ``repr`` is the whole repr of a value shown on one line (not cut, no newline made a
            space: a run of spaces is taken as one), so that it is what the notebook displays.
    """

    name: str
    type: str
    shape: str | None
    repr: str
    whole: bool


def read_dump(runtime: str) -> dict[str, DumpedVariable]:
    """The variables of a runtime dump by name (empty for an empty or unreadable dump)."""
    variables = {}
    for line in runtime.split("\n"):
        m = _LINE.match(line)
        if m is None:
            continue
        text = m["repr"]
        cut = len(text) >= DUMP_REPR_CHARS or "more characters]" in text or "<not shown" in text
        whole = not cut and "  " not in text and "0x…" not in text
        variables[m["name"]] = DumpedVariable(m["name"], m["type"], m["shape"], text, whole)
    return variables


def _length(var: DumpedVariable) -> str | None:
    """``len(x)``: the first dimension of a shape, or the length of a whole literal's value."""
    if var.shape:
        first = re.match(r"\((\d+)", var.shape)
        return first.group(1) if first else None
    if var.whole:
        try:
            value = ast.literal_eval(var.repr)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if isinstance(value, str | bytes | list | tuple | dict | set | frozenset):
            return str(len(value))
    return None


def scalar_answer(expr: DisplayedExpression, variables: dict[str, DumpedVariable]) -> str | None:
    """A ``value``, ``shape``, ``len`` or ``type`` expression's text from the dump, or None."""
    var = variables.get(expr.name)
    if var is None:
        return None
    if expr.kind == "value":
        return var.repr if var.whole else None
    if expr.kind == "shape":
        return var.shape
    if expr.kind == "len":
        return _length(var)
    if expr.kind == "type":
        return displayed_class(var.type)
    return None


def dump_answer(expr: DisplayedExpression, variables: dict[str, DumpedVariable]) -> str | None:
    """What a displayed expression shows, from the dump (tuples element by element, as IPython prints a
    short tuple), or None when the dump does not hold it (frames' heads, dtypes, describe, info)."""
    if expr.kind == "tuple":
        texts = [scalar_answer(part, variables) for part in expr.parts]
        if any(t is None for t in texts):
            return None
        items = [t for t in texts if t is not None]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return scalar_answer(expr, variables)


__all__ = ["DUMP_REPR_CHARS", "DumpedVariable", "dump_answer", "read_dump", "scalar_answer"]
