"""The text a person sees for a cell's outputs: the target of the output-prediction task.

`render_outputs` turns nbformat v4 outputs into that text; `normalize_for_comparison` replaces what
legitimately differs between two runs of a cell (durations, addresses, temporary paths, process ids) so that
replay agreement can compare a recording with its replay. It is never applied to prediction targets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from themisto_env.errors import DataError

__all__ = ["VARYING_SPAN", "normalize_for_comparison", "render_outputs", "strip_ansi", "varying_characters"]

# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), charset selection (ESC ( B), two-character escapes.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+][0-9A-Za-z]|\x1b[@-Z\\-_]")

_MIME_PRIORITY = (
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "text/html",
    "text/markdown",
    "text/latex",
    "application/json",
    "application/javascript",
)


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (colours, cursor movement, terminal titles) from ``text``.

    Args:
        text: Any text, e.g. a traceback with IPython's colours.

    Returns:
        The text without escape sequences.
    """
    if "\x1b" not in text:
        return text
    return _ANSI_RE.sub("", text)


def _as_text(value: Any) -> str:
    """nbformat stores multiline strings either as one string or as a list of lines."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return "".join(str(v) for v in value)
    return str(value)


def _apply_carriage_returns(text: str) -> str:
    r"""Overwrite each line's text before a bare ``\r`` with the text after it, as a terminal does."""
    if "\r" not in text:
        return text
    text = re.sub(r"\r+\n", "\n", text)
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            segments = line.split("\r")
            shown = segments[0]
            for segment in segments[1:]:
                shown = segment + shown[len(segment) :]
            line = shown
        lines.append(line)
    return "\n".join(lines)


def _render_stream(text: str) -> str:
    return _apply_carriage_returns(strip_ansi(text))


def _render_data(data: Mapping[str, Any]) -> str:
    if not data:
        return ""
    if "text/plain" in data:
        return strip_ansi(_as_text(data["text/plain"]))
    mime = next((m for m in _MIME_PRIORITY if m in data), None) or min(data)
    return f"<{mime}>"


def _render_error(output: Mapping[str, Any]) -> str:
    name = strip_ansi(_as_text(output.get("ename")))
    value = strip_ansi(_as_text(output.get("evalue")))
    return f"{name}: {value}" if value else name


def render_outputs(outputs: Iterable[Mapping[str, Any]], *, include_stderr: bool = True) -> str:
    """Render a cell's nbformat v4 outputs as the plain text a person sees.

    One rule per kind, the parts joined by one newline (a part's own final newline dropped, empty parts
    skipped):

    - ``stream``: adjacent streams of one name are concatenated, then terminal control is applied as a
      front end does (ANSI codes removed, ``\\r\\n`` a newline, a bare ``\\r`` overwrites the line: a tqdm
      bar renders as its last state).
    - ``execute_result``, ``display_data``: the ``text/plain`` entry, else a placeholder naming the first
      present mime type (``<image/png>``); empty ``data`` renders as nothing.
    - ``error``: ``ENAME: evalue`` (or ``ENAME``), as Python prints an exception's last line. The traceback
      is left out: its cell file names, paths and line numbers differ between a recording and a replay.
    - any other ``output_type``: ignored.

    Args:
        outputs: The cell's outputs in order, as nbformat v4 dicts (``output_type`` and its fields).
        include_stderr: Whether ``stderr`` stream text (warnings, logging) is part of the rendering.

    Returns:
        The rendered text, without a trailing newline; ``""`` for a cell without visible output.

    Raises:
        DataError: An output is not a mapping.
    """
    parts: list[str] = []
    stream_name: str | None = None
    stream_chunks: list[str] = []

    def flush_stream() -> None:
        nonlocal stream_name
        if stream_name is not None:
            parts.append(_render_stream("".join(stream_chunks)))
            stream_chunks.clear()
            stream_name = None

    for position, output in enumerate(outputs):
        if not isinstance(output, Mapping):
            raise DataError(f"output {position} is a {type(output).__name__}, not an nbformat output dict")
        kind = output.get("output_type")
        if kind == "stream":
            name = str(output.get("name", "stdout"))
            if name == "stderr" and not include_stderr:
                continue
            if name != stream_name:
                flush_stream()
                stream_name = name
            stream_chunks.append(_as_text(output.get("text")))
            continue
        flush_stream()
        if kind in ("execute_result", "display_data"):
            data = output.get("data") or {}
            parts.append(_render_data(data if isinstance(data, Mapping) else {}))
        elif kind == "error":
            parts.append(_render_error(output))
    flush_stream()
    rendered = (p[:-1] if p.endswith("\n") else p for p in parts if p)
    return "\n".join(p for p in rendered if p)


_TIME_UNIT = r"(?:ns|[µμu]s|ms|s|secs?|seconds?)"
_NUMBER = r"\d+(?:[.,]\d+)*"
_NORMALIZERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^CPU times:.*$", re.MULTILINE), "CPU times: <TIME>"),
    (re.compile(r"^Wall time:.*$", re.MULTILINE), "Wall time: <TIME>"),
    (re.compile(rf"^.*{_NUMBER}\s*{_TIME_UNIT} ± .* per loop.*$", re.MULTILINE), "<TIMEIT>"),
    (re.compile(r"^.*\bloops?, best of \d+:.*$", re.MULTILINE), "<TIMEIT>"),
    (re.compile(r"^The slowest run took .*(?:\n|$)", re.MULTILINE), ""),
    (re.compile(r"\[[\d:]+<[\d:?]+,\s*[^\]]*\]"), "[<ELAPSED>]"),
    (re.compile(rf"{_NUMBER}\s*(?:it/s|s/it)\b"), "<RATE>"),
    (re.compile(rf"(?<![\w.]){_NUMBER}\s?{_TIME_UNIT}(?![^\W/])"), "<TIME>"),
    (re.compile(r"\b0x[0-9a-fA-F]{8,16}\b"), "0x<ADDR>"),
    (
        re.compile(
            r"(?:/private)?/var/folders/[^\s'\"():,]+"
            r"|(?<![\w.])/(?:var/)?tmp/[^\s'\"():,]*"
            r"|[A-Za-z]:\\[^\s'\"]*?\\Temp\\[^\s'\"():,]*",
            re.IGNORECASE,
        ),
        "<TMPPATH>",
    ),
    (re.compile(r"\b(pid|PID|process)(\s*[:=]?\s*)\d+\b"), r"\1\2<PID>"),
)


VARYING_SPAN = 6
"""How far one varying span (an address, a duration, a process id, a temporary path) may change in length
between two runs of the same cell."""


def varying_characters(text: str) -> int:
    """How far the length of ``text`` may differ from another run's of the same cell.

    Each span `normalize_for_comparison` replaces (durations, addresses, temporary paths, process ids)
    counts its length up to `VARYING_SPAN`; escape codes count whole.
    """
    varying = len(text) - len(strip_ansi(text))
    text = strip_ansi(text)
    spans = (len(m.group(0)) for pattern, _ in _NORMALIZERS for m in pattern.finditer(text))
    return varying + sum(min(span, VARYING_SPAN) for span in spans)


def normalize_for_comparison(text: str) -> str:
    """Replace what legitimately varies between two runs with fixed placeholders.

    Used to measure replay agreement: two renderings of the same cell's outputs agree when their normalised
    forms are equal. In order: ANSI codes go; ``%time`` and ``%timeit`` lines become ``<TIME>`` and
    ``<TIMEIT>``; tqdm's ``[00:01<00:02, 85.21it/s]`` becomes ``[<ELAPSED>]`` and a rate ``<RATE>``; a number
    with a time unit (``ns`` to ``seconds``; not minutes: ``min`` is a pandas row label) becomes ``<TIME>``;
    ``0x`` and 8 to 16 hex digits become ``0x<ADDR>``; paths under ``/tmp/``, ``/var/tmp/``, macOS
    ``/var/folders/`` or Windows ``Temp`` become ``<TMPPATH>``; a labelled process id (``pid 123``) becomes
    ``<PID>``; trailing whitespace and blank edge lines go. Everything else is compared as is.

    Args:
        text: Rendered output text (see `render_outputs`).

    Returns:
        The normalised text.
    """
    text = strip_ansi(text)
    for pattern, replacement in _NORMALIZERS:
        text = pattern.sub(replacement, text)
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)
