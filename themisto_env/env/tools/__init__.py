"""Observation tools: how an agent queries the live kernel state and the history before it answers.

Used two ways: by the gymnasium env, where each tool call is an action ``ToolCall(tool=NAME, args={...})``
answered by `run_tool`, and by LLM agents through `langchain_tools`, langchain-core tools
bound to the env's current state. Every answer is bounded text. Every tool is a read-only query of the
env's kernel but ``try_cell``, which runs the agent's candidate next cell in a disposable kernel at the
current state (through `ToolContext.try_code`; the env's kernel is never touched) and answers with its
outputs, status and changed variables. langchain-core is imported only when `langchain_tools` is
first used.

Example:
    >>> ctx = ToolContext(kernel=kernel, history=[HistoryItem(0, "x = 41 + 1", "")])
    >>> run_tool(ToolCall(tool="inspect_variable", args={"name": "x"}), ctx).text
    'x: int\nsize 28 B\nvalue:\n42'
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
