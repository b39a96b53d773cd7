"""A conversation as plain data, for a run's results: one dict per langchain-core message.

``{"role": "system" | "user" | "assistant" | "tool", "content": str}``; an assistant message also has its
``tool_calls`` (``[{"id", "name", "args"}]``, the unparsable ones with their ``error``) and its token
``usage`` when the model reported it; a tool message has the ``tool_call_id`` it answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def message_text(message: Any) -> str:
    """The text of a chat message: its string content, or the text parts of a list content.

    Args:
        message: An ``AIMessage`` (or anything with ``content``).

    Returns:
        The text ("" when there is none).
    """
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content if isinstance(content, Sequence) else ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "".join(parts)


def message_record(message: Any) -> dict[str, Any]:
    """One message as a plain dict (see the module docstring)."""
    role = ROLES.get(getattr(message, "type", ""), str(getattr(message, "type", "user")))
    record: dict[str, Any] = {"role": role, "content": message_text(message)}
    calls = [
        {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
        for c in getattr(message, "tool_calls", None) or []
    ]
    calls += [
        {"id": c.get("id"), "name": c.get("name"), "args": c.get("args"), "error": c.get("error")}
        for c in getattr(message, "invalid_tool_calls", None) or []
    ]
    if calls:
        record["tool_calls"] = calls
    if getattr(message, "tool_call_id", None):
        record["tool_call_id"] = message.tool_call_id
    if usage := getattr(message, "usage_metadata", None):
        record["usage"] = {k: usage.get(k) for k in ("input_tokens", "output_tokens")}
    return record


def transcript(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """The messages as plain dicts."""
    return [message_record(m) for m in messages]


__all__ = ["message_record", "message_text", "transcript"]
