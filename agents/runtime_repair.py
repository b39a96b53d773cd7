"""Next-cell prediction after a failed lookup: the cell run again with the name the state defines.

When the last cell failed with ``NameError: name 'x' is not defined`` or ``KeyError: 'col'``, people usually
run it again with the name fixed. The state before the next cell says which names exist: the kernel's
variables (and the names imported in the history), and the columns of the frames the cell reads. The
nearest existing name (`nearest`) replaces the missing one. ``tools`` mode asks ``list_variables`` and
``dataframe_info`` (`repair_plan`); ``full`` mode reads the runtime dump's names and its frames' header rows
(`dump_repair`). Nothing else of the cell is changed; no match gives None (the agent falls back).
"""

from __future__ import annotations

import ast
import difflib
import re

from themisto_env.agents.base import Observation
from themisto_env.agents.displayed import is_pandas
from themisto_env.agents.history import parse_history
from themisto_env.agents.needed_names import parse_cell
from themisto_env.agents.runtime_dump import read_dump
from themisto_env.agents.runtime_rules import Plan, frame_columns, imported_names, variable_types
from themisto_env.env.tools import ToolCall

_NAME_ERROR = re.compile(r"NameError: name '([^']+)' is not defined")
_KEY_ERROR = re.compile(r"KeyError: (.+)$", re.MULTILINE)
_QUOTED = re.compile(r"'([^']+)'")
#: How close a name must be to count as the one meant (difflib's ratio, after folding case, '_' and ' ').
CUTOFF = 0.75
#: At most this many frames of a cell are asked for their columns.
MAX_FRAMES = 2


def failed_lookup(output: str) -> tuple[str, list[str]] | None:
    """``("name", [x])`` for a NameError, ``("key", [col, ...])`` for a KeyError in a cell's output, or None."""
    if m := _NAME_ERROR.search(output):
        return "name", [m.group(1)]
    if m := _KEY_ERROR.search(output):
        text = m.group(1).strip()
        if text.startswith("'Column not found: "):  # pandas' groupby: KeyError: 'Column not found: col'
            keys = [text.strip("'").removeprefix("Column not found: ").strip()]
        else:
            keys = _QUOTED.findall(text)
        return ("key", keys) if keys else None
    return None


def _fold(word: str) -> str:
    return word.lower().replace("_", " ").strip()


def nearest(word: str, candidates: set[str]) -> str | None:
    """The candidate nearest to ``word`` (not ``word`` itself), if one is close enough (`CUTOFF`)."""
    others = {_fold(c): c for c in sorted(candidates) if c != word}
    match = difflib.get_close_matches(_fold(word), list(others), n=1, cutoff=CUTOFF)
    return others[match[0]] if match else None


def _replace_name(source: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![\w.]){re.escape(old)}\b", new, source)


def _replace_key(source: str, old: str, new: str) -> str:
    return source.replace(f"'{old}'", f"'{new}'").replace(f'"{old}"', f'"{new}"')


def _cell_names(source: str) -> list[str]:
    """The names a cell reads, in order of first appearance."""
    parsed = parse_cell(source)
    if parsed is None:
        return []
    return list(dict.fromkeys(n.id for n in ast.walk(parsed[0]) if isinstance(n, ast.Name)))


def fixed_cell(source: str, kind: str, missing: list[str], candidates: set[str]) -> str | None:
    """The cell with each missing name (or key) replaced by its nearest candidate, or None if none is near."""
    fixed = source
    for word in missing:
        near = nearest(word, candidates)
        if near is not None:
            fixed = _replace_name(fixed, word, near) if kind == "name" else _replace_key(fixed, word, near)
    return fixed if fixed != source else None


def repair_plan(observation: Observation) -> Plan:
    """``tools``: the last cell with its missing name or column fixed from the live state (None: no fix)."""
    cells = parse_history(str(observation.get("history", "")))
    failed = failed_lookup(cells[-1].output) if cells else None
    if failed is None:
        return None
    kind, missing = failed
    types = variable_types((yield ToolCall(tool="list_variables", args={})))
    if types is None:
        return None
    last = cells[-1].source
    if kind == "name":
        return fixed_cell(last, kind, missing, set(types) | imported_names(observation))
    columns: set[str] = set()
    frames = [n for n in _cell_names(last) if is_pandas(types.get(n, ""), "DataFrame")][:MAX_FRAMES]
    for frame in frames:
        columns |= set(frame_columns((yield ToolCall(tool="dataframe_info", args={"name": frame}))) or ())
    return fixed_cell(last, kind, missing, columns)


def dump_repair(observation: Observation) -> str | None:
    """``full``: the same fix from the runtime dump (names; the words of its frames' shown reprs as columns)."""
    cells = parse_history(str(observation.get("history", "")))
    failed = failed_lookup(cells[-1].output) if cells else None
    variables = read_dump(str(observation.get("runtime", "")))
    if failed is None or not variables:
        return None
    kind, missing = failed
    last = cells[-1].source
    if kind == "name":
        return fixed_cell(last, kind, missing, set(variables) | imported_names(observation))
    words = {
        word
        for name in _cell_names(last)
        if name in variables and is_pandas(variables[name].type, "DataFrame")
        for word in variables[name].repr.split()
    }
    return fixed_cell(last, kind, missing, words)


__all__ = ["CUTOFF", "MAX_FRAMES", "dump_repair", "failed_lookup", "fixed_cell", "nearest", "repair_plan"]
