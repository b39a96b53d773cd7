"""The agent's actions: a tool call or a prediction, never guessed from text.

In the gymnasium action space an action is a dict ``{"kind", "tool", "args", "text"}``:

* ``kind`` 0 = call an observation tool: ``tool`` is the index into ``TOOL_NAMES``, ``args`` a JSON
  object of its arguments;
* ``kind`` 1 = submit a prediction: ``text`` is the predicted cell source or output.

Agents may also pass :class:`ToolCall` or :class:`Prediction` objects directly. :func:`parse_action`
turns either form into one of the two, or raises :class:`ActionError` saying what is wrong; the env
answers that in the observation rather than ending the episode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from themisto_env.env.tools import TOOL_NAMES, ToolCall
from themisto_env.errors import ActionError

TOOL_CALL, PREDICT = 0, 1


class Prediction(BaseModel):
    """Submit a prediction for the current sample."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str


Action = ToolCall | Prediction


def encode_action(action: Action) -> dict[str, Any]:
    """The action-space form of an action."""
    if isinstance(action, Prediction):
        return {"kind": PREDICT, "tool": 0, "args": "", "text": action.text}
    if action.tool not in TOOL_NAMES:
        raise ActionError(f"unknown tool {action.tool!r}; tools: {', '.join(TOOL_NAMES)}")
    return {
        "kind": TOOL_CALL,
        "tool": TOOL_NAMES.index(action.tool),
        "args": json.dumps(action.args),
        "text": "",
    }


def parse_action(raw: object) -> Action:
    """Read an action in either form.

    Raises:
        ActionError: The action is malformed (the message says how).
    """
    if isinstance(raw, (ToolCall, Prediction)):
        return raw
    if not isinstance(raw, Mapping):
        raise ActionError(
            "an action is a ToolCall, a Prediction or a dict with 'kind', 'tool', 'args', 'text'; "
            f"got {type(raw).__name__}"
        )
    kind = raw.get("kind")
    try:
        kind = int(kind)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ActionError(f"'kind' must be 0 (tool call) or 1 (prediction), got {kind!r}") from None
    if kind == PREDICT:
        text = raw.get("text")
        if not isinstance(text, str):
            raise ActionError(f"a prediction needs 'text' as a string, got {type(text).__name__}")
        return Prediction(text=text)
    if kind != TOOL_CALL:
        raise ActionError(f"'kind' must be 0 (tool call) or 1 (prediction), got {kind}")
    tool = raw.get("tool")
    try:
        name = TOOL_NAMES[int(tool)]  # type: ignore[arg-type]
    except (TypeError, ValueError, IndexError):
        raise ActionError(
            f"'tool' must be an index below {len(TOOL_NAMES)} ({', '.join(TOOL_NAMES)}), got {tool!r}"
        ) from None
    args_text = raw.get("args") or "{}"
    try:
        args = json.loads(args_text) if isinstance(args_text, str) else args_text
    except json.JSONDecodeError as exc:
        raise ActionError(f"'args' of {name} is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise ActionError(f"'args' of {name} must be a JSON object, got {type(args).__name__}")
    return ToolCall(tool=name, args=args)
