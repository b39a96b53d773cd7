"""Reading the observation's ``history`` text back into cells.

The env renders the recent executions as (see `themisto_env.env.observation`)::

    # In [7]:
    <source>
    # Out [7]:
    <output, possibly cut with a "... [N more characters]" marker>

[`parse_history`][themisto_env.agents.parse_history] inverts that: a header line ``# In [n]:`` starts a cell, and a line
``# Out [n]:`` with the *same* ``n`` separates its source from its output (a source line that merely
looks like a header of another number stays source).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IN = re.compile(r"^# In \[(\d+)\]:$")
_OUT = re.compile(r"^# Out \[(\d+)\]:$")


@dataclass(frozen=True)
class HistoryCell:
    """One execution shown in the history.

    Attributes:
        number: Its ``In``/``Out`` number (1-based position in the trajectory).
        source: The cell's source.
        output: Its rendered output ("" when it showed nothing).
    """

    number: int
    source: str
    output: str = ""


def parse_history(text: str) -> list[HistoryCell]:
    """The executions in a rendered history, oldest first.

    Args:
        text: The observation's ``history`` (may be empty).

    Returns:
        The cells; text before the first ``# In [n]:`` header (a history cut to fit) is ignored.
    """
    cells: list[HistoryCell] = []
    number: int | None = None
    source: list[str] = []
    output: list[str] | None = None

    def close() -> None:
        if number is not None:
            out = "\n".join(output).strip("\n") if output is not None else ""
            cells.append(HistoryCell(number, "\n".join(source).strip("\n"), out))

    for line in text.splitlines():
        header = _IN.match(line)
        # a header after an output, or after a blank line (blocks are separated by one), starts a new cell
        if header is not None and (output is not None or number is None or not source or not source[-1].strip()):
            close()
            number, source, output = int(header.group(1)), [], None
            continue
        marker = _OUT.match(line)
        if marker is not None and number is not None and output is None and int(marker.group(1)) == number:
            output = []
            continue
        (source if output is None else output).append(line)
    close()
    return cells


__all__ = ["HistoryCell", "parse_history"]
