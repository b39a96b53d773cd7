"""Turning a DataFrame's ``to_string()`` text into the text a notebook shows for it.

The observation tools show frames as ``to_string()``: every column on one line. A notebook shows
``repr(frame)``, which pandas lays out for ``display.width`` (80) and ``display.max_columns`` (20):
more than 20 columns keep the first and last 10 around a ``...`` column (and a ``[R rows x C columns]``
footer is added), and columns that do not fit in 80 characters wrap into blocks separated by a blank
line, each line but the last block's ending in `` \\`` on the header. `notebook_frame_text` redoes
that layout from the ``to_string()`` text alone.

The columns are found from the text: the index is left-justified from column 0, every other column is
right-justified, and columns are separated by one space. A column's right edge is a position where every
data row has a character and every line has a space (or its end) just after. When the text is not a
well-formed table (lines of different lengths, cut text, no columns found), it is returned unchanged.
Index labels containing spaces (``corr()`` of columns named ``mean radius``) are not told apart from
the columns; vertical truncation (more than 60 rows) is not done: ``head(n)`` and ``describe()``, the
texts this is for, have neither.
"""

from __future__ import annotations

from dataclasses import dataclass

#: pandas' notebook defaults (``display.width``, ``display.max_columns``).
DISPLAY_WIDTH = 80
MAX_COLUMNS = 20


@dataclass(frozen=True)
class _Table:
    lines: list[str]
    index_width: int
    spans: list[tuple[int, int]]  # (start, end) of each column's content, end exclusive
    header_lines: int


def notebook_frame_text(text: str) -> str:
    """The notebook's ``repr`` layout of a DataFrame given its ``to_string()`` text.

    Args:
        text: ``frame.to_string()`` (every column on one line).

    Returns:
        The text laid out as a notebook shows the frame, or ``text`` unchanged when it does not read as
        a table.
    """
    table = _read_table(text)
    if table is None:
        return text
    columns = [[line[start:end] for line in table.lines] for start, end in table.spans]
    truncated = len(columns) > MAX_COLUMNS
    if truncated:
        half = MAX_COLUMNS // 2
        dots = [" ..."] * len(table.lines)
        columns = [*columns[:half], dots, *columns[-half:]]
    index = [line[: table.index_width] for line in table.lines]
    bins = _binify([len(c[0]) for c in columns], DISPLAY_WIDTH - (table.index_width + 1))
    blocks, start = [], 0
    for i, end in enumerate(bins):
        row = [index, *columns[start:end]]
        if len(bins) > 1:
            row.append([" \\"] + ["  "] * (len(table.lines) - 1) if i < len(bins) - 1 else [" "] * len(table.lines))
        blocks.append(_adjoin(row))
        start = end
    laid_out = "\n\n".join(blocks)
    if truncated:
        rows = len(table.lines) - table.header_lines
        laid_out += f"\n\n[{rows} rows x {len(table.spans)} columns]"
    return laid_out


def _read_table(text: str) -> _Table | None:
    lines = text.split("\n")
    length = len(lines[0])
    if len(lines) < 2 or length == 0 or any(len(line) != length for line in lines):
        return None
    blank = [all(line[p] == " " for line in lines) for p in range(length)]
    index_end = next((p for p in range(1, length) if blank[p]), None)
    if index_end is None:
        return None
    rows = [line for line in lines if line[:index_end].strip() and line[index_end:].strip()]
    if not rows:
        return None
    spans, start = [], index_end + 1
    for p in range(start, length):
        after_blank = p + 1 == length or blank[p + 1]
        if after_blank and all(row[p] != " " for row in rows):
            spans.append((start, p + 1))
            start = p + 2
    if not spans or spans[-1][1] != length:
        return None
    header_lines = next((i for i, line in enumerate(lines) if line in rows), len(lines))
    return _Table(lines, index_end, spans, header_lines)


def _adjoin(columns: list[list[str]]) -> str:
    """pandas' ``adjoin(1, *columns)`` for columns whose strings have equal widths."""
    widths = [max(len(s) for s in column) for column in columns]
    lines = []
    for i in range(len(columns[0])):
        parts = [column[i].ljust(w + 1) for column, w in zip(columns[:-1], widths[:-1], strict=True)]
        lines.append("".join(parts) + columns[-1][i].ljust(widths[-1]))
    return "\n".join(lines)


def _binify(widths: list[int], line_width: int) -> list[int]:
    """pandas' column bins for wrapping: the end index of each block of columns."""
    bins, current, last = [], 0, len(widths) - 1
    for i, w in enumerate(widths):
        current += w + 1
        wrap = (current + (1 if i == last else 2) > line_width) and i > 0
        if wrap:
            bins.append(i)
            current = w + 1
    bins.append(len(widths))
    return bins


__all__ = ["DISPLAY_WIDTH", "MAX_COLUMNS", "notebook_frame_text"]
