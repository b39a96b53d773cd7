"""Kernel messages into notebook outputs: the one conversion used by the sandbox, the recorder and the
bundled-data generator.

An execution's iopub messages become the nbformat v4 outputs a notebook would save, by nbclient's rules
plus the stream merging every front end shows (`OutputCollector`), under an output cap. Importing this
module has no side effects and needs only the standard library (the recorder imports it inside a user's
kernel).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

OUTPUT_MESSAGES = frozenset(
    {"stream", "display_data", "update_display_data", "execute_result", "error", "clear_output"}
)
"""The iopub message kinds that change a cell's outputs."""

DROPPED_KEY = "themisto_dropped"
"""The metadata key naming the mime types the output cap dropped from a display output."""
OVER_CAP_KEY = "themisto_over_cap"
"""The metadata key naming the images kept past the output cap by the image budget."""


def output_from_message(msg_type: str, content: Mapping[str, Any]) -> dict[str, Any] | None:
    """The nbformat v4 output of one message (nbformat's ``output_from_msg`` minus its slow validation).

    Args:
        msg_type: The message kind (``update_display_data`` gives a ``display_data`` output).
        content: The message's content.

    Returns:
        The output, or None for a message that is not an output (``clear_output``, ``status``, ...).
    """
    if msg_type == "stream":
        return {"output_type": "stream", "name": str(content.get("name", "stdout")), "text": content.get("text", "")}
    if msg_type == "error":
        return {
            "output_type": "error",
            "ename": content.get("ename"),
            "evalue": content.get("evalue"),
            "traceback": list(content.get("traceback") or []),
        }
    if msg_type in ("display_data", "update_display_data", "execute_result"):
        kind = "execute_result" if msg_type == "execute_result" else "display_data"
        data, metadata = content.get("data") or {}, content.get("metadata") or {}
        output = {"output_type": kind, "data": dict(data), "metadata": dict(metadata)}
        if kind == "execute_result":
            output["execution_count"] = content.get("execution_count")
        return output
    return None


def output_size(output: Mapping[str, Any]) -> int:
    """An output's size for the cap: its stream text, else the JSON of its data (characters), without the
    images kept past the cap."""
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    over = (output.get("metadata") or {}).get(OVER_CAP_KEY) or ()
    data = output.get("data", output)
    if over and isinstance(data, Mapping):
        data = {mime: value for mime, value in data.items() if mime not in over}
    return len(json.dumps(data, default=str))


def _human(size: int) -> str:
    if size >= 1_000_000:
        return f"{size / 1e6:.1f} MB"
    if size >= 1_000:
        return f"{size / 1e3:.1f} kB"
    return f"{size} B"


def _display_id(content: Mapping[str, Any]) -> str | None:
    transient = content.get("transient")  # may be explicitly None
    value = transient.get("display_id") if isinstance(transient, Mapping) else None
    return str(value) if value is not None else None


class OutputCollector:
    """The outputs of one execution, built message by message.

    A ``stream`` is appended to the previous output when that is a stream of the same name, else it is a
    new output. ``display_data`` and ``execute_result`` are new outputs; one with a
    ``transient.display_id`` first updates the earlier outputs with that id. ``update_display_data``
    replaces the ``data`` and ``metadata`` of the outputs with its id (an unknown id is ignored).
    ``clear_output`` removes every output now, or with ``wait=True`` just before the next new one. Other
    messages are ignored.

    The cap keeps what fits, in order: a stream is cut; a display output that does not fit keeps its
    ``text/plain`` alone if that fits, naming what it dropped under `DROPPED_KEY`, else it is dropped whole;
    `finish` notes what was left out on stderr. Images the cap would drop from an output that keeps its
    ``text/plain`` are kept while they fit in the image budget, named under `OVER_CAP_KEY`.

    Args:
        limit: The output cap in characters; None for no cap.
        images_limit: The image budget in characters (0: images over the cap are dropped).

    Attributes:
        omitted: Characters left out by the cap (stream text cut, outputs dropped whole).
        dropped: Display outputs that lost rich data to the cap but kept their ``text/plain``.
    """

    def __init__(self, limit: int | None = None, *, images_limit: int = 0) -> None:
        self.limit = limit
        self.images_left = images_limit
        self.omitted = 0
        self.dropped = 0
        self._items: list[dict[str, Any]] = []
        self._ids: list[str | None] = []
        self._sizes: list[int] = []
        self._clear_pending = False

    @property
    def truncated(self) -> bool:
        """Whether the cap left anything out."""
        return bool(self.omitted or self.dropped)

    def add_message(self, msg: Mapping[str, Any]) -> None:
        """Add a Jupyter message as received (``msg_type`` at the top or in its header, and ``content``)."""
        kind = msg.get("msg_type") or (msg.get("header") or {}).get("msg_type")
        content = msg.get("content")
        if isinstance(kind, str) and isinstance(content, Mapping):
            self.add(kind, content)

    def add(self, msg_type: str, content: Mapping[str, Any]) -> None:
        """Add one message by kind and content."""
        if msg_type not in OUTPUT_MESSAGES:
            return
        if msg_type == "clear_output":
            if content.get("wait"):
                self._clear_pending = True
            else:
                self._clear()
            return
        display_id = _display_id(content) if msg_type not in ("stream", "error") else None
        output = output_from_message(msg_type, content)
        assert output is not None
        if display_id is not None:
            self._update(display_id, output)
        if msg_type == "update_display_data":
            return
        if self._clear_pending:
            self._clear()
        self._append(output, display_id)

    def finish(self) -> list[dict[str, Any]]:
        """The outputs, with a note on stderr at the end when the cap cut or dropped some."""
        items = copy.deepcopy(self._items)
        if self.omitted:
            items.append(
                {
                    "output_type": "stream",
                    "name": "stderr",
                    "text": f"\n[output truncated: {self.omitted} more bytes not shown]\n",
                }
            )
        return items

    # -- internals ---------------------------------------------------------------------------------

    def _clear(self) -> None:
        self._items, self._ids, self._sizes, self._clear_pending = [], [], [], False

    def _room(self) -> int | None:
        return None if self.limit is None else self.limit - sum(self._sizes)

    def _fit(self, output: dict[str, Any], room: int | None) -> dict[str, Any] | None:
        """The output as it fits in ``room``: whole, reduced to its text/plain, or None."""
        if room is None or output_size(output) <= room:
            return output
        data = output.get("data") or {}
        if "text/plain" in data and len(data) > 1:
            dropped = [
                f"{mime} ({_human(len(json.dumps(value, default=str)))})"
                for mime, value in data.items()
                if mime != "text/plain"
            ]
            reduced = {
                **output,
                "data": {"text/plain": data["text/plain"]},
                "metadata": {**(output.get("metadata") or {}), DROPPED_KEY: dropped},
            }
            if output_size(reduced) <= room:
                self._keep_images(reduced, data)
                if reduced["metadata"][DROPPED_KEY]:
                    self.dropped += 1
                else:
                    del reduced["metadata"][DROPPED_KEY]
                return reduced
        self.omitted += output_size(output)
        return None

    def _keep_images(self, reduced: dict[str, Any], data: Mapping[str, Any]) -> None:
        """Put back into a reduced output the images that fit in the image budget (see `OutputCollector`)."""
        kept = []
        for mime, value in data.items():
            size = len(json.dumps(value, default=str))
            if mime.startswith("image/") and size <= self.images_left:
                self.images_left -= size
                reduced["data"][mime] = value
                kept.append(mime)
        if kept:
            metadata = reduced["metadata"]
            metadata[DROPPED_KEY] = [d for d in metadata[DROPPED_KEY] if d.split(" ", 1)[0] not in kept]
            metadata[OVER_CAP_KEY] = kept

    def _update(self, display_id: str, output: dict[str, Any]) -> None:
        for i, known in enumerate(self._ids):
            if known != display_id:
                continue
            old = self._items[i]
            room = self._room()
            fitted = self._fit(output, None if room is None else room + self._sizes[i])
            if fitted is None:
                continue
            old["data"] = fitted["data"]
            old["metadata"] = fitted["metadata"]
            self._sizes[i] = output_size(old)

    def _append(self, output: dict[str, Any], display_id: str | None) -> None:
        room = self._room()
        last = self._items[-1] if self._items else None
        if output["output_type"] == "stream":
            text = output["text"]
            if room is not None and len(text) > room:
                self.omitted += len(text) - max(room, 0)
                text = text[: max(room, 0)]
            if not text:
                return
            if last is not None and last["output_type"] == "stream" and last["name"] == output["name"]:
                last["text"] += text
                self._sizes[-1] += len(text)
                return
            output["text"] = text
        else:
            fitted = self._fit(output, room)
            if fitted is None:
                return
            output = fitted
        self._items.append(output)
        self._ids.append(display_id)
        self._sizes.append(output_size(output))


__all__ = [
    "DROPPED_KEY",
    "OUTPUT_MESSAGES",
    "OutputCollector",
    "output_from_message",
    "output_size",
]
