"""Every bridge's tools are the tool table's: the same names, arguments, types, defaults and descriptions,
read back through each framework's own schema machinery (transformers' `get_json_schema` for TRL, the MCP
server of a verifiers toolset, inspect_ai's `ToolDef`, langchain's `args_schema`).

No kernel is started: the schemas are what the frameworks read off the tools before any call.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

import pytest

from themisto_env.bridges.rl.tool_env import ROLLOUT_TOOLS, ThemistoToolEnv, tool_methods
from themisto_env.env.tools import SUBMIT, TOOLS, ToolContext, ToolSpec, langchain_tools, task_tools
from themisto_env.env.tools._functions import tool_docstring
from themisto_env.env.tools._run import argument_description

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def table_schema(tool: ToolSpec) -> dict[str, Any]:
    """What the table says a model reads of ``tool``: its name and description, and each argument's JSON
    type, text description (bounds included), default where it has one, and whether it is required."""
    schema = tool.args_model.model_json_schema()
    arguments = {}
    for name, info in tool.args_model.model_fields.items():
        argument = {"type": schema["properties"][name]["type"], "description": argument_description(info)}
        if not info.is_required():
            argument["default"] = info.default
        arguments[name] = argument
    return {
        "name": tool.name,
        "description": tool.description,
        "arguments": arguments,
        "required": sorted(schema.get("required", [])),
    }


def trl_tools(cls: type) -> list[str]:
    """The tools TRL's GRPOTrainer takes from an ``environment_factory`` class (trl 1.16, grpo_trainer.py:
    the class's public functions but ``reset`` and ``get_reward``)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def json_schema_of(method: Any, tool: ToolSpec) -> dict[str, Any]:
    """transformers' schema of a tool method, in `table_schema`'s shape (defaults from its signature: the
    function schema leaves them out)."""
    from transformers.utils import get_json_schema

    function = get_json_schema(method)["function"]
    parameters = inspect.signature(method).parameters
    arguments = {}
    for name, argument in function["parameters"]["properties"].items():
        arguments[name] = {"type": argument["type"], "description": argument["description"]}
        if parameters[name].default is not inspect.Parameter.empty:
            arguments[name]["default"] = parameters[name].default
    return {
        "name": function["name"],
        "description": function["description"],
        "arguments": arguments,
        "required": sorted(function["parameters"].get("required", [])),
    }


def test_the_rollout_tools_are_the_tables_read_only_tools_and_submit() -> None:
    assert [tool.name for tool in ROLLOUT_TOOLS] == [
        *(tool.name for tool in task_tools("output")),
        SUBMIT.name,
    ]
    assert all(TOOLS[tool.name] is tool for tool in ROLLOUT_TOOLS[:-1]) and ROLLOUT_TOOLS[-1] is SUBMIT
    assert not any(tool.name not in (t.name for t in task_tools("next-cell")) for tool in ROLLOUT_TOOLS[:-1])


@pytest.mark.parametrize("tool", ROLLOUT_TOOLS, ids=lambda tool: tool.name)
def test_trl_reads_the_tables_schema_off_the_tool_env(tool: ToolSpec) -> None:
    pytest.importorskip("transformers")
    assert trl_tools(ThemistoToolEnv) == sorted(t.name for t in ROLLOUT_TOOLS), "TRL offers exactly these"
    method = getattr(ThemistoToolEnv, tool.name)
    assert json_schema_of(method, tool) == table_schema(tool)
    assert inspect.getdoc(method) == tool_docstring(tool)


def test_the_openenv_example_rollout_has_the_same_tools() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("openenv", reason="the openenv extra is not installed")
    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_grpo_openenv import RemoteRollout
    finally:
        sys.path.remove(str(EXAMPLES))
    assert trl_tools(RemoteRollout) == trl_tools(ThemistoToolEnv)
    for tool in ROLLOUT_TOOLS:
        assert json_schema_of(getattr(RemoteRollout, tool.name), tool) == table_schema(tool)


def test_tool_methods_are_what_trl_offers_in_its_order() -> None:
    rollout = object.__new__(ThemistoToolEnv)  # no states: the methods are the class's
    assert [method.__name__ for method in tool_methods(rollout)] == trl_tools(ThemistoToolEnv)


def test_a_tool_method_passes_on_only_the_arguments_given() -> None:
    """The table's args model fills the defaults (through run_tool), positional or by name."""
    calls = []

    class Probe:
        def _call(self, tool: str, args: dict[str, Any]) -> str:
            calls.append((tool, args))
            return "answer"

    from themisto_env.env.tools import tool_method

    head = tool_method(TOOLS["dataframe_head"], Probe._call)
    assert head(Probe(), "df") == head(Probe(), name="df", n=3) == "answer"
    assert calls == [("dataframe_head", {"name": "df"}), ("dataframe_head", {"name": "df", "n": 3})]
    with pytest.raises(TypeError, match="unexpected keyword argument 'rows'"):
        head(Probe(), name="df", rows=3)


@pytest.mark.slow  # importing verifiers takes seconds
def test_the_verifiers_toolset_serves_the_tables_schema() -> None:
    if importlib.util.find_spec("verifiers") is None:
        pytest.skip("verifiers is not installed")
    from mcp.server.mcpserver import MCPServer

    from themisto_env.bridges.vf_taskset import ThemistoTools, ThemistoToolsConfig

    server = MCPServer("themisto-tools")
    ThemistoTools(ThemistoToolsConfig(states={})).register(server)
    served = asyncio.run(server.list_tools())
    assert [tool.name for tool in served] == [tool.name for tool in ROLLOUT_TOOLS]
    for tool, offered in zip(ROLLOUT_TOOLS, served, strict=True):
        properties = offered.input_schema["properties"]
        arguments = {
            name: {key: value for key, value in argument.items() if key in ("type", "description", "default")}
            for name, argument in properties.items()
        }
        seen = {
            "name": offered.name,
            "description": offered.description,
            "arguments": arguments,
            "required": sorted(offered.input_schema.get("required", [])),
        }
        assert seen == table_schema(tool)


def test_inspect_offers_the_tables_tools_with_their_json_schema() -> None:
    pytest.importorskip("inspect_ai", reason="inspect_ai is not installed")
    from inspect_ai.tool import ToolDef

    from themisto_env.bridges.inspect_task import observation_tools

    offered = [ToolDef(tool) for tool in observation_tools()]
    assert [tool.name for tool in offered] == list(TOOLS)
    for tool, seen in zip(TOOLS.values(), offered, strict=True):
        schema = tool.args_model.model_json_schema()
        assert seen.description == tool.description
        assert seen.parameters.required == schema.get("required", [])
        for name, argument in schema.get("properties", {}).items():
            property_ = seen.parameters.properties[name].model_dump(exclude_none=True)
            wanted = {
                k: v for k, v in argument.items() if k in ("type", "description", "default", "minimum", "maximum")
            }
            assert {k: v for k, v in property_.items() if k in wanted} == wanted, (tool.name, name)
        assert set(seen.parameters.properties) == set(schema.get("properties", {}))
    subset = [ToolDef(tool).name for tool in observation_tools(tuple(t.name for t in task_tools("output")))]
    assert subset == [tool.name for tool in task_tools("output")]


def test_langchain_binds_the_tables_tools() -> None:
    tools = langchain_tools(lambda: ToolContext(kernel=None))  # type: ignore[arg-type]  # never called
    assert [(t.name, t.description, t.args_schema) for t in tools] == [
        (tool.name, tool.description, tool.args_model) for tool in TOOLS.values()
    ]
