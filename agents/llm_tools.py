"""``llm-tools``: a chat model with the observation tools bound, every tool call an env step.

The tools are bound with ``bind_tools`` but never run by langchain: each tool call the model makes becomes
the agent's action ``ToolCall(tool, args)``, and the observation's ``tool_result`` becomes the
``ToolMessage`` the model reads. Once the budget is spent, pending calls are answered "not run" and the
model is asked once more without tools; it is asked at most ``max_model_calls`` times per sample.
"""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from themisto_env.agents.base import Info, Observation
from themisto_env.agents.llm import LLMAgent
from themisto_env.agents.parsing import extract_prediction
from themisto_env.agents.transcript import message_text, transcript
from themisto_env.env import Action
from themisto_env.env.actions import Prediction
from themisto_env.env.tools import ToolCall, ToolContext
from themisto_env.errors import ConfigError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import Runnable


@dataclass(frozen=True)
class _ModelTurn:
    """The model must be asked: with these messages, with or without the tools bound."""

    messages: list[BaseMessage]
    with_tools: bool


def _unbound_context() -> ToolContext:
    raise ConfigError("llm-tools runs tools through env.step(ToolCall(...)); its langchain tools are schemas only")


class ToolUsingAgent(LLMAgent):
    """``llm-tools``: the model queries the kernel with the observation tools, then answers.

    Args:
        chat_model: A model that supports ``bind_tools``; or give ``provider`` and ``model``.
        max_model_calls: Model calls allowed per sample (default: the tool budget plus 2).
        **options: As for `LLMAgent`.
    """

    name = "llm-tools"
    mode = "tools"
    observation = "tools"

    def __init__(self, chat_model: BaseChatModel | None = None, *, max_model_calls: int | None = None, **options: Any):
        super().__init__(chat_model, **options)
        self.max_model_calls = max_model_calls
        self._tool_model: Runnable[Any, Any] | None = None
        self._bound: tuple[str, ...] = ()
        self._start_sample_state()

    def _start_sample_state(self) -> None:
        self._messages: list[BaseMessage] | None = None
        self._pending: deque[dict[str, Any]] = deque()
        self._awaiting: str | None = None
        self._limit = 0
        self._told_to_answer = False
        self._last_reply: Any = None

    # -- the protocol ------------------------------------------------------------------------------

    def start_sample(self, observation: Observation, info: Info) -> None:
        """Forget the previous sample's conversation."""
        self._start_sample_state()

    def decide(self, observation: Observation, info: Info) -> Action:
        """The next tool call the model asked for, or its prediction (asking the model as needed)."""
        step = self._advance(observation, info)
        while isinstance(step, _ModelTurn):
            reply = self.call_model(self._model(step, info), step.messages)
            step = self._receive(reply, observation, info)
        return step

    async def adecide(self, observation: Observation, info: Info) -> Action:
        """Async `decide` (the model's ``ainvoke``)."""
        step = self._advance(observation, info)
        while isinstance(step, _ModelTurn):
            reply = await self.acall_model(self._model(step, info), step.messages)
            step = self._receive(reply, observation, info)
        return step

    # -- the conversation --------------------------------------------------------------------------

    def _advance(self, observation: Observation, info: Info) -> Action | _ModelTurn:
        from langchain_core.messages import ToolMessage

        if self._messages is None:
            tools = self._tools_left(observation, info) > 0
            self._messages = self.messages(observation, str(info["task"]), "tools" if tools else "static")
            budget = int(observation.get("tools_left", 0)) if tools else 0
            self._limit = self.max_model_calls if self.max_model_calls is not None else budget + 2
        elif self._awaiting is not None:
            result = str(observation.get("tool_result", ""))
            self._messages.append(ToolMessage(content=result, tool_call_id=self._awaiting))
            self._awaiting = None
        return self._next(observation, info)

    def _next(self, observation: Observation, info: Info) -> Action | _ModelTurn:
        from langchain_core.messages import HumanMessage, ToolMessage

        assert self._messages is not None
        tools_left = self._tools_left(observation, info)
        while self._pending:
            call = self._pending.popleft()
            if tools_left > 0:
                self._awaiting = call["id"]
                return ToolCall(tool=str(call.get("name", "")), args=dict(call.get("args") or {}))
            self._messages.append(ToolMessage(content=self.prompts.tool_not_run, tool_call_id=call["id"]))
        if self.usage.model_calls + self.usage.cached_calls >= self._limit:  # replies, made or replayed
            return self._prediction(self._last_reply, info)
        if tools_left <= 0 and self.usage.tool_calls > 0 and not self._told_to_answer:
            self._messages.append(HumanMessage(self.prompts.budget_spent))
            self._told_to_answer = True
        return _ModelTurn(list(self._messages), with_tools=tools_left > 0)

    def _receive(self, reply: Any, observation: Observation, info: Info) -> Action | _ModelTurn:
        assert self._messages is not None
        self.record(reply)
        self._last_reply = reply
        self.transcript = transcript([*self._messages, reply])  # kept if a later call fails (a model_error row)
        from langchain_core.messages import ToolMessage

        calls = list(getattr(reply, "tool_calls", None) or [])
        invalid = list(getattr(reply, "invalid_tool_calls", None) or [])
        for call in [*calls, *invalid]:  # every tool call needs an id for its ToolMessage
            call["id"] = call.get("id") or f"call_{uuid.uuid4().hex[:12]}"
        self._messages.append(reply)
        for call in invalid:  # arguments that did not parse: the model reads why, no env step is taken
            error = f"Error: the tool call could not be read ({call.get('error') or 'its arguments are not JSON'})."
            self._messages.append(ToolMessage(content=error, tool_call_id=call["id"], status="error"))
        if not calls and not invalid:
            return self._prediction(reply, info)
        self._pending.extend(calls)
        return self._next(observation, info)

    def _prediction(self, reply: Any, info: Info) -> Prediction:
        text = message_text(reply) if reply is not None else ""
        self.transcript = transcript(self._messages or [])
        return Prediction(text=extract_prediction(text, str(info["task"])))  # type: ignore[arg-type]

    # -- the models --------------------------------------------------------------------------------

    @staticmethod
    def _tools_left(observation: Observation, info: Info) -> int:
        return int(observation.get("tools_left", 0)) if info.get("tool_names") else 0

    def _model(self, turn: _ModelTurn, info: Info) -> Runnable[Any, Any]:
        if not turn.with_tools:
            return self.chat_model
        names = tuple(info.get("tool_names", ()))
        if self._tool_model is None or names != self._bound:
            from themisto_env.env.tools import langchain_tools

            tools = [tool for tool in langchain_tools(_unbound_context) if tool.name in names]
            try:
                self._tool_model = self.chat_model.bind_tools(tools)
            except NotImplementedError as exc:
                raise ConfigError(
                    f"{type(self.chat_model).__name__} does not support tool calling (bind_tools); "
                    "use llm-static or llm-full with it"
                ) from exc
            self._bound = names
        return self._tool_model


__all__ = ["ToolUsingAgent"]
