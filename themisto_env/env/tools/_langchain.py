"""The observation tools as langchain-core tools, bound to the env's current state at call time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from themisto_env.env.tools._models import ObservationTool, ToolCall, ToolContext, ToolResult
from themisto_env.env.tools._observations import TOOLS
from themisto_env.env.tools._run import run_tool

#: Called after every call made through a langchain tool, with the call and its result.
OnCall = Callable[[ToolCall, ToolResult], None]


class ObservationStructuredTool(StructuredTool):
    """A StructuredTool that hands the model's raw arguments to `run_tool`.

    Its ``args_schema`` is the observation tool's pydantic model (what ``bind_tools`` shows a model), but
    the arguments are validated by ``run_tool`` rather than by langchain, so that a call with bad
    arguments gets the same answer as through the env and is seen by the ``on_call`` hook.

    It overrides langchain-core's ``BaseTool._to_args_and_kwargs`` (the step that validates against
    ``args_schema``; unchanged since langchain-core 0.2); ``tests/env/test_tools.py`` pins the behaviour.
    """

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(tool_input, str):  # a bare string is the first argument, as langchain does it
            fields = list(getattr(self.args_schema, "model_fields", {}))
            tool_input = {fields[0]: tool_input} if fields else {}
        return (), {"raw_args": dict(tool_input)}


def langchain_tools(get_context: Callable[[], ToolContext], *, on_call: OnCall | None = None) -> list[BaseTool]:
    """One langchain-core tool per observation tool, in `TOOL_NAMES` order.

    Each tool has the observation tool's name, description and args schema, and runs `run_tool` on
    the context ``get_context()`` returns at call time (the env's current state). An ``ok=False`` result
    is raised as a ``ToolException`` that the tool turns into its answer (a ``ToolMessage`` with
    ``status="error"`` when invoked with a tool call); infrastructure errors propagate. Calls through the
    returned tools are serialized (the kernel's client is not thread-safe). ``try_cell`` is among them: it
    runs through the context's ``try_code`` and refuses in one line where that is None (the output task);
    an agent that should not see it filters it out by name, as ``llm-tools`` does with ``info["tool_names"]``.

    Args:
        get_context: Returns the context to answer from; called once per tool call.
        on_call: Called after every answered call (including ``ok=False`` ones) with the call and its
            result, so that the env can count it against the budget.

    Returns:
        The tools, ready for ``chat_model.bind_tools(tools)``.
    """
    lock = threading.Lock()
    return [_langchain_tool(tool, get_context, on_call, lock) for tool in TOOLS.values()]


def _langchain_tool(
    tool: ObservationTool,
    get_context: Callable[[], ToolContext],
    on_call: OnCall | None,
    lock: threading.Lock,
) -> BaseTool:
    def invoke(raw_args: dict[str, Any]) -> str:
        call = ToolCall(tool=tool.name, args=raw_args)
        with lock:
            result = run_tool(call, get_context())
        if on_call is not None:
            on_call(call, result)
        if not result.ok:
            raise ToolException(result.text)
        return result.text

    return ObservationStructuredTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_model,
        func=invoke,
        handle_tool_error=True,
    )
