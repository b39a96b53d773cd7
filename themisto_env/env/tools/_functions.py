"""The tools as Python functions with real signatures and Google docstrings, made from the tool table.

Some frameworks read a tool's schema off a callable: TRL's `environment_factory` takes an environment's
public methods and reads each one's signature and Google docstring (`transformers.utils.get_json_schema`);
the MCP server of a verifiers toolset reads a function's signature (its `Annotated` descriptions) and
docstring. `tool_method` and `tool_function` make those callables from a `ToolSpec`, so that what a model
reads there is what the table says: the tool's name and description, each argument's type, default and
description (bounds included, as `argument_description` writes them).

The callables pass on only the arguments given: the table's args model fills the defaults and validates
(through `run_tool`), so a call with a bad argument is answered as the env answers it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from pydantic import Field

from themisto_env.env.tools._models import ToolSpec
from themisto_env.env.tools._run import argument_description

#: Calls a tool on an object: `(owner, tool name, the arguments given) -> answer`.
MethodCall = Callable[[Any, str, dict[str, Any]], str]
#: Calls a tool: `(tool name, the arguments given) -> answer`, awaited.
AsyncCall = Callable[[str, dict[str, Any]], Awaitable[str]]


def parameters(tool: ToolSpec) -> list[inspect.Parameter]:
    """The tool's arguments as Python parameters, in the args model's order: each annotated with its type
    and (through `Annotated[..., Field(description=...)]`) its description; optional ones with their default."""
    found = []
    for name, info in tool.args_model.model_fields.items():
        annotation = Annotated[info.annotation, Field(description=argument_description(info))]  # type: ignore[valid-type]
        default = inspect.Parameter.empty if info.is_required() else info.default
        found.append(
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation)
        )
    return found


def tool_docstring(tool: ToolSpec) -> str:
    """The tool's Google docstring: its description, an `Args:` line per argument, and `Returns:`."""
    fields = tool.args_model.model_fields
    lines = [tool.description, ""]
    if fields:
        lines += ["Args:", *(f"    {name}: {argument_description(info)}" for name, info in fields.items()), ""]
    lines += ["Returns:", f"    {tool.returns}"]
    return "\n".join(lines)


def tool_method(tool: ToolSpec, call: MethodCall) -> Callable[..., str]:
    """A method for a class body, named, typed and documented as the tool (`self` first), that answers
    `call(self, tool.name, arguments)` with the arguments given.

    Args:
        tool: The tool.
        call: What answers it.

    Returns:
        A plain function (`inspect.isfunction` is true, as TRL asks of an environment's tools) with
        `__name__`, `__doc__`, `__signature__` and `__annotations__` from the table.
    """
    own = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature = inspect.Signature([own, *parameters(tool)], return_annotation=str)

    def method(*args: Any, **kwargs: Any) -> str:
        arguments = dict(signature.bind(*args, **kwargs).arguments)
        return call(arguments.pop("self"), tool.name, arguments)

    return _named(method, tool, signature)


def tool_function(tool: ToolSpec, call: AsyncCall) -> Callable[..., Awaitable[str]]:
    """A coroutine function named, typed and documented as the tool (no `self`), that answers
    `await call(tool.name, arguments)` with the arguments given (an MCP server's tool)."""
    signature = inspect.Signature(parameters(tool), return_annotation=str)

    async def function(*args: Any, **kwargs: Any) -> str:
        return await call(tool.name, dict(signature.bind(*args, **kwargs).arguments))

    return _named(function, tool, signature)


def _named(function: Any, tool: ToolSpec, signature: inspect.Signature) -> Any:
    function.__name__ = function.__qualname__ = tool.name
    function.__doc__ = tool_docstring(tool)
    function.__signature__ = signature
    function.__annotations__ = {
        **{p.name: p.annotation for p in signature.parameters.values() if p.annotation is not inspect.Parameter.empty},
        "return": str,
    }
    return function
