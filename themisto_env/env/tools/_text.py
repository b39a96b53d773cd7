"""Compact text for the agent: human-readable sizes, aligned tables, and cutting to a bound with a marker."""

from __future__ import annotations

from collections.abc import Sequence

_UNITS = ("B", "KB", "MB", "GB", "TB")


def human_size(n_bytes: int | None) -> str:
    """A byte count as people read it (1024-based, as pandas prints it): ``512 B``, ``1.2 MB``.

    Args:
        n_bytes: The size in bytes, or None when unknown.

    Returns:
        The size with a unit, or ``?`` when unknown.
    """
    if n_bytes is None:
        return "?"
    size = float(n_bytes)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def shape_or_length(shape: Sequence[int] | None, length: int | None) -> str:
    """``(100, 10)`` for an object with a shape, ``len 3`` for a sized one, else empty."""
    if shape is not None:
        return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return f"len {length}" if length is not None else ""


def ellipsize(text: str, width: int) -> str:
    """Cut a one-line text to ``width`` characters, ending with ``…`` when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, max_width: int = 48) -> str:
    """An aligned plain-text table; cells wider than ``max_width`` are ellipsized."""
    cells = [[ellipsize(str(c), max_width) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def clip(text: str, limit: int, *, keep: str = "head") -> str:
    """Cut ``text`` to at most ``limit`` characters, saying how much was cut.

    With ``keep="head"`` the beginning is kept (cut at a line end where one is near); with
    ``keep="middle"`` the beginning and the end are kept (the end of an output often holds the error).

    Args:
        text: The text.
        limit: The maximum length of the result, marker included.
        keep: ``head`` or ``middle``.

    Returns:
        ``text`` itself when it fits, else the kept part(s) with a marker such as
        ``... [1,234 more characters]``.
    """
    if len(text) <= limit:
        return text
    # The marker's length depends on the count; reserve room for the longest count possible.
    room = max(limit - len(_marker(len(text), keep)), 0)
    if keep == "middle" and room >= 40:
        head_n = room // 2
        tail_n = room - head_n
        cut = len(text) - head_n - tail_n
        return text[:head_n] + _marker(cut, keep) + (text[-tail_n:] if tail_n else "")
    kept = text[:room]
    newline = kept.rfind("\n")
    if newline >= room * 0.7:
        kept = kept[:newline]
    marker = _marker(len(text) - len(kept), "head")
    return (kept + marker if kept else marker.lstrip("\n"))[:limit]


def _marker(cut: int, keep: str) -> str:
    if keep == "middle":
        return f"\n... [{cut:,} characters cut] ...\n"
    return f"\n... [{cut:,} more characters]"
