"""Outputs recorded as kind and size only, as the published JuNE log keeps them.

JuNE publishes each output as ``{"output_type": "stream", "size": 23}``: its kind and the length of its
text, not the text. Such a log says what kinds a cell showed, in order, and how long each was; the text a
person read comes from the replay, as in Themisto. This module tells how much a log recorded (the
`RecordLevel`), writes outputs in the published shape (`to_kind_and_size`, what the test fixtures are made
with), and splits outputs into the parts that shape can compare (`parts`, `same_parts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from themisto_env.data.june_events import JuneEvent
from themisto_env.sandbox.rendering import render_outputs, varying_characters

RecordLevel = Literal["content", "kind-and-size", "nothing"]
"""What a step's recording holds: whole outputs, each output's kind and size only, or nothing to compare with."""
RECORD_LEVELS: tuple[RecordLevel, ...] = get_args(RecordLevel)
LEVEL_WORDS: dict[RecordLevel, str] = {
    "content": "content",
    "kind-and-size": "kind and size",
    "nothing": "nothing recorded",
}
"""Each level as prose says it."""

_CONTENT_KEYS = frozenset({"text", "data", "evalue", "traceback"})
_SIZED = frozenset({"stream", "execute_result"})
"""Kinds whose size is compared; a display's size is its image's bytes in one renderer or another, and an
error's its traceback's, which holds paths and line numbers: for those only the kind (and an error's name)."""


def is_kind_and_size(output: Mapping[str, Any]) -> bool:
    """Whether an output was recorded as kind and size only (a ``size``, no text, data or traceback)."""
    return "size" in output and not _CONTENT_KEYS & output.keys()


def record_level(outputs: Sequence[Mapping[str, Any]] | None) -> RecordLevel:
    """How much of a step's outputs a recording holds (None: nothing was recorded)."""
    if outputs is None:
        return "nothing"
    return "kind-and-size" if any(is_kind_and_size(o) for o in outputs) else "content"


def output_text(output: Mapping[str, Any]) -> str:
    """The text of one output whose length is its size: a stream's text, a result's or display's
    ``text/plain``, an error's ``ENAME: evalue``."""
    if output.get("output_type") == "stream":
        text = output.get("text")
        return "".join(text) if isinstance(text, list) else str(text or "")
    return render_outputs([output])


def to_kind_and_size(outputs: Iterable[Mapping[str, Any]], *, error_names: bool = False) -> list[dict[str, Any]]:
    """Outputs in the published JuNE shape: ``{"output_type", "size"}`` each, in order.

    Args:
        outputs: nbformat outputs.
        error_names: Keep an error's ``ename`` too (some recorders do).
    """
    shaped = []
    for output in outputs:
        one: dict[str, Any] = {"output_type": output.get("output_type"), "size": len(output_text(output))}
        if error_names and output.get("output_type") == "error" and output.get("ename"):
            one["ename"] = output["ename"]
        shaped.append(one)
    return shaped


def published_events(events: Iterable[JuneEvent], *, error_names: bool = False) -> Iterator[JuneEvent]:
    """A JuNE log as JuNE publishes it: every event's outputs as kind and size only (`to_kind_and_size`)."""
    for event in events:
        if event.cell_output is None:
            yield event
        else:
            yield event.model_copy(update={"cell_output": to_kind_and_size(event.cell_output, error_names=error_names)})


@dataclass(frozen=True)
class Part:
    """One output as kind and size compare it; consecutive streams are one part, as a notebook shows them.

    Attributes:
        kind: The output type.
        size: Its length in characters (None: unknown or not compared).
        slack: How far two runs' sizes may differ (the characters that vary between runs).
        ename: An error's name, where known.
        text: The text (replayed outputs only).
    """

    kind: str
    size: int | None
    slack: float = 0.0
    ename: str | None = None
    text: str | None = None


def _size(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def parts(outputs: Sequence[Mapping[str, Any]]) -> list[Part]:
    """Split outputs into parts: recorded ones by their ``size``, replayed ones by their text."""
    found: list[Part] = []
    for output in outputs:
        kind = str(output.get("output_type"))
        if is_kind_and_size(output):
            size = _size(output.get("size")) if kind in _SIZED else None
            ename = output.get("ename")
            part = Part(kind, size, ename=str(ename) if ename else None)
        else:
            text = output_text(output)
            unknown = kind not in _SIZED or "\r" in text  # a progress bar's length is how often it was drawn
            ename = output.get("ename") if kind == "error" else None
            part = Part(kind, None if unknown else len(text), varying_characters(text), ename, text)
        if found and kind == "stream" and found[-1].kind == "stream":
            last = found.pop()
            size = None if last.size is None or part.size is None else last.size + part.size
            text = None if last.text is None else last.text + (part.text or "")
            part = Part("stream", size, last.slack + part.slack, None, text)
        found.append(part)
    return found


def _sizes_agree(recorded: Part, replayed: Part) -> bool:
    if recorded.size is None or replayed.size is None:
        return True
    nearest = min(abs(recorded.size - replayed.size), abs(recorded.size - len((replayed.text or "").encode())))
    return nearest <= replayed.slack


def same_parts(recorded: Sequence[Part], replayed: Sequence[Part]) -> bool:
    """The kinds in order agree, each size within the replayed part's slack, and an error's name where
    one was recorded."""
    return len(recorded) == len(replayed) and all(
        a.kind == b.kind and _sizes_agree(a, b) and (a.ename is None or a.ename == b.ename)
        for a, b in zip(recorded, replayed, strict=True)
    )


def describe(recorded: Sequence[Part], replayed: Sequence[Part]) -> str:
    """The first difference, in words (``recorded stream of 23 characters, replayed stream of 31``)."""

    def say(part: Part | None) -> str:
        if part is None:
            return "nothing"
        if part.kind == "error" and part.ename:
            return f"error {part.ename}"
        return part.kind if part.size is None else f"{part.kind} of {part.size} characters"

    for i in range(max(len(recorded), len(replayed))):
        a = recorded[i] if i < len(recorded) else None
        b = replayed[i] if i < len(replayed) else None
        if a is None or b is None or not same_parts([a], [b]):
            return f"recorded {say(a)}, replayed {say(b)}"
    return ""


__all__ = [
    "LEVEL_WORDS",
    "RECORD_LEVELS",
    "Part",
    "RecordLevel",
    "describe",
    "is_kind_and_size",
    "output_text",
    "parts",
    "published_events",
    "record_level",
    "same_parts",
    "to_kind_and_size",
]
