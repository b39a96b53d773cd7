"""The recorder's capture of one cell: its outputs as the notebook shows them, and teed text streams.

The conversion of kernel messages to nbformat outputs is
`OutputCollector`, shared with the sandbox; this module feeds it.
"""

from __future__ import annotations

import base64
import contextlib
import threading
from typing import Any, TextIO

from themisto_env.sandbox.outputs import OutputCollector


def jsonable(value: Any) -> Any:
    """A JSON-ready copy of a display payload: bytes as base64, unknown objects as their text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class TeeStream:
    """A text stream that writes through to the real one and hands each write to a callback."""

    def __init__(self, stream: TextIO, on_write: Any) -> None:
        self._stream = stream
        self._on_write = on_write

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        with contextlib.suppress(Exception):
            self._on_write(text)
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class CellCapture:
    """The outputs of the running cell, in the order the notebook shows them (the conversion is
    `OutputCollector`, shared with the sandbox)."""

    def __init__(self, execution_count: int) -> None:
        self.collector = OutputCollector()
        self.execution_count = execution_count
        self.lock = threading.Lock()

    def add(self, msg_type: str, content: dict[str, Any]) -> None:
        with self.lock:
            self.collector.add(msg_type, content)

    def stream(self, name: str, text: str) -> None:
        self.add("stream", {"name": name, "text": text})

    def display(self, data: dict[str, Any], metadata: dict[str, Any] | None, transient: Any, update: bool) -> None:
        content = {"data": jsonable(data), "metadata": jsonable(metadata or {}), "transient": jsonable(transient)}
        self.add("update_display_data" if update else "display_data", content)

    def result(self, data: dict[str, Any], metadata: dict[str, Any] | None, count: int | None = None) -> None:
        count = count if count is not None else self.execution_count
        content = {"data": jsonable(data), "metadata": jsonable(metadata or {}), "execution_count": count}
        self.add("execute_result", content)

    def error(self, ename: str, evalue: str, traceback: list[str]) -> None:
        self.add("error", {"ename": ename, "evalue": evalue, "traceback": list(traceback)})

    def clear(self, wait: bool) -> None:
        self.add("clear_output", {"wait": wait})

    def final(self) -> list[dict[str, Any]]:
        with self.lock:
            return self.collector.finish()


def message_id(parent: Any) -> str | None:
    """The msg_id of a parent given as a message or as a header."""
    if not isinstance(parent, dict):
        return None
    header = parent.get("header") if isinstance(parent.get("header"), dict) else parent
    value = header.get("msg_id")
    return str(value) if value is not None else None


__all__ = ["CellCapture", "TeeStream", "jsonable", "message_id"]
