"""Running a tool call without ever raising for the agent's mistakes, and the tools' signatures in text."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from themisto_env.data.limits import MAX_ARGS_CHARS, MAX_ARGS_DEPTH, MAX_NAME_CHARS, depth_exceeds, echo, size_exceeds
from themisto_env.env.tools._models import ObservationTool, ToolCall, ToolContext, ToolError, ToolResult
from themisto_env.env.tools._observations import TOOL_NAMES, TOOLS
from themisto_env.env.tools._render import render
from themisto_env.env.tools._text import clip


def run_tool(call: ToolCall | Mapping[str, Any], ctx: ToolContext) -> ToolResult:
    """Run one observation tool on the context's kernel and history.

    The agent's mistakes never raise: an unknown tool (with the nearest name suggested), missing or
    invalid arguments (naming the field), and a name the kernel does not define (with the nearest
    names) all come back as ``ok=False`` results whose ``text`` says what went wrong.

    Args:
        call: The call, or a mapping with its fields (``{"tool": ..., "args": {...}}``).
        ctx: The kernel, history and bounds to answer from.

    Returns:
        The result: its typed answer in ``data``, and its ``text`` (rendered from it) at most
        ``ctx.max_chars`` characters.

    Raises:
        InfrastructureError: The kernel died, timed out, or is not running (not the agent's fault).
    """
    if not isinstance(call, ToolCall):
        try:
            call = ToolCall.model_validate(call)
        except ValidationError as exc:
            name = call.get("tool") if isinstance(call, Mapping) else None
            shown = name[:MAX_NAME_CHARS] if isinstance(name, str) else "?"
            return _failure(shown or "?", f"malformed tool call: {format_validation_error(exc)}", ctx)
    if depth_exceeds(call.args, MAX_ARGS_DEPTH) or size_exceeds(call.args, MAX_ARGS_CHARS):
        limits = f"at most {MAX_ARGS_CHARS} chars nested at most {MAX_ARGS_DEPTH} deep"
        return _failure(call.tool[:MAX_NAME_CHARS], f"arguments outside the limits ({limits})", ctx)
    tool = TOOLS.get(call.tool)
    if tool is None:
        return _failure(call.tool[:MAX_NAME_CHARS], unknown_tool_message(call.tool, offered_tools(ctx)), ctx)
    try:
        args = tool.args_model.model_validate(call.args)
    except ValidationError as exc:
        message = f"invalid arguments for {tool.name}: {format_validation_error(exc)}. Usage: {signature(tool)}"
        return _failure(tool.name, message, ctx)
    try:
        answer = tool.function(ctx, args)
    except ToolError as exc:
        return _failure(tool.name, str(exc), ctx)
    return ToolResult(tool=tool.name, ok=True, text=clip(render(answer), ctx.max_chars), data=answer)


def _failure(tool: str, error: str, ctx: ToolContext) -> ToolResult:
    return ToolResult(tool=tool, ok=False, text=clip(f"Error: {error}", ctx.max_chars), error=error)


def offered_tools(ctx: ToolContext) -> tuple[str, ...]:
    """The tools this context answers, in `TOOL_NAMES` order: the read-only ones, and those that run code
    only where it may (``ctx.try_code``: not in the output task)."""
    return tuple(name for name in TOOL_NAMES if TOOLS[name].read_only or ctx.try_code is not None)


def nearest_tool(name: str, offered: Sequence[str] = TOOL_NAMES) -> str | None:
    """The tool name of ``offered`` closest to a misspelled or partial one (``df_head`` -> ``dataframe_head``),
    if any (none for a name longer than `MAX_NAME_CHARS`)."""
    wanted = name.strip().lower().replace("-", "_").replace(" ", "_")
    if not wanted or len(wanted) > MAX_NAME_CHARS:
        return None
    if wanted in offered:
        return wanted
    near = difflib.get_close_matches(wanted, offered, n=1, cutoff=0.6)
    if near:
        return near[0]
    containing = [tool for tool in offered if wanted in tool or tool in wanted]
    if len(containing) == 1:
        return containing[0]
    near = difflib.get_close_matches(wanted, offered, n=1, cutoff=0.45)
    return near[0] if near else None


def unknown_tool_message(name: str, offered: Sequence[str] = TOOL_NAMES) -> str:
    """The error for an unknown tool: the nearest name, and the name of every tool ``offered`` (the task's)."""
    near = nearest_tool(name, offered)
    hint = f" Did you mean {near!r}?" if near else ""
    return f"unknown tool {echo(name)}.{hint} The tools are: {', '.join(offered)}."


def format_validation_error(exc: ValidationError) -> str:
    """A pydantic validation error as one line naming each offending field."""
    problems = []
    for error in exc.errors():
        field = ".".join(str(part)[:MAX_NAME_CHARS] for part in error["loc"][:4]) or "arguments"
        if error["type"] == "missing":
            problems.append(f"{field!r} is required")
        elif error["type"] == "extra_forbidden":
            problems.append(f"{field!r} is not an argument of this tool")
        else:
            given = error.get("input")
            got = echo(given) if isinstance(given, str) else _short_repr(given)
            problems.append(f"{field!r}: {error['msg']} (got {got})")
    if len(problems) > 5:  # a call with thousands of bad fields is not answered with thousands of lines
        problems[5:] = [f"and {len(problems) - 5} more"]
    return "; ".join(problems)


def _short_repr(value: Any) -> str:
    """The repr of a small value, or its type for a large or deep one (no recursion over the caller's data)."""
    if depth_exceeds(value, 4) or size_exceeds(value, 200):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def signature(tool: ObservationTool) -> str:
    """The tool's call signature, e.g. ``dataframe_head(name: str, n: int = 5)``."""
    return f"{tool.name}({', '.join(_parameter(name, info) for name, info in tool.args_model.model_fields.items())})"


def _parameter(name: str, info: Any) -> str:
    annotation = info.annotation
    kind = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return f"{name}: {kind}" if info.is_required() else f"{name}: {kind} = {info.default!r}"


def argument_description(info: Any) -> str:
    """An argument's description as a model reads it in text: the field's description with its bounds, e.g.
    `How many first rows to show (1 to 50).` (`info`: a pydantic `FieldInfo` of a tool's args model)."""
    low = next((m.ge for m in info.metadata if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in info.metadata if getattr(m, "le", None) is not None), None)
    bounds = f" ({low} to {high})" if low is not None and high is not None else ""
    return f"{info.description.rstrip('.')}{bounds}."
