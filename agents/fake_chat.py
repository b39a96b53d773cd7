"""A scripted chat model that supports ``bind_tools``: for tests and offline demos of the LLM agents.

langchain-core's ``GenericFakeChatModel`` replays the messages it is given, including ``AIMessage``\\ s
with real ``tool_calls``, but has no ``bind_tools``. `ScriptedChatModel` adds it (binding records
the tools' names and returns the model itself, as langchain's own tests do) and keeps what it was asked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field


class ScriptedChatModel(GenericFakeChatModel):
    """Replays scripted replies; ``bind_tools`` records the tools and returns the model.

    Args:
        responses: The replies in order: strings or ``AIMessage``\\ s (with ``tool_calls`` and
            ``usage_metadata`` if wanted).
        cycle: Start again from the first reply after the last one (else a further call raises
            ``StopIteration``).

    Attributes:
        bound_tools: The names of the tools last bound.
        prompts: The messages of every call, in order.
    """

    bound_tools: list[str] = Field(default_factory=list)
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def __init__(self, responses: Sequence[str | AIMessage] = ("```\n```",), *, cycle: bool = False, **kwargs: Any):
        replies: Iterable[str | AIMessage] = itertools.cycle(responses) if cycle else iter(responses)
        super().__init__(messages=iter(replies), **kwargs)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        """Record the tools' names; return the model itself (it replays tool calls as scripted)."""
        self.bound_tools = [_tool_name(tool) for tool in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        return str(tool.get("name") or tool.get("function", {}).get("name", "?"))
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", "?"))


__all__ = ["ScriptedChatModel"]
