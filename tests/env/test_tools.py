"""Observation tools on a real local kernel: answers, bounds, errors answered not raised, read-only, langchain."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from themisto_env.env.tools import (
    TOOL_NAMES,
    TOOLS,
    HistoryItem,
    ToolCall,
    ToolContext,
    ToolResult,
    langchain_tools,
    run_tool,
)
from themisto_env.env.tools._history import find_definition
from themisto_env.env.tools._models import ToolError
from themisto_env.env.tools._run import argument_description, signature
from themisto_env.errors import ActionError, InfrastructureError, KernelDiedError
from themisto_env.sandbox.kernel.answers import FrameView
from themisto_env.sandbox.kernel.core import Kernel

CELLS = (
    "import numpy as np\nimport pandas as pd\nfrom sklearn.linear_model import LinearRegression",
    "frame = pd.DataFrame({'city': ['Oslo', 'Rome', 'Lima', 'Kyiv'], 'temp': [3.5, 18.0, 22.1, 7.4],"
    " 'visits': [10, 25, 7, 12]})\nframe.head(2)",
    "arr = np.arange(1000, dtype=np.float64).reshape(100, 10)\n"
    "model = LinearRegression().fit(arr[:, :3], arr[:, 3])\n"
    "config = {'lr': 0.01, 'layers': [64, 32], 'name': 'baseline'}",
    "def area(r):\n    '''Area of a circle.'''\n    return 3.14159 * r * r\n\n"
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n\n"
    "origin = Point(0, 0)\nprint(area(2))",
    "big = list(range(100_000))\nlong_text = 'x' * 50_000\n"
    "wide = pd.DataFrame(np.ones((30, 60)), columns=[f'column_{i}' for i in range(60)])\n"
    "empty = pd.DataFrame()",
    "1 / 0",
)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, list[HistoryItem]]]:
    """One local kernel for the module, with CELLS executed and their history."""
    with Kernel("local", snapshot_dir=tmp_path_factory.mktemp("snapshots")) as kernel:
        items = []
        for index, cell in enumerate(CELLS):
            result = kernel.execute(cell)
            assert result.status == ("error" if cell == "1 / 0" else "ok"), result.text()
            items.append(HistoryItem(index=index, source=cell, output=result.text()))
        yield kernel, items


@pytest.fixture
def ctx(history: tuple[Kernel, list[HistoryItem]]) -> ToolContext:
    """A context over the module's kernel with the default bounds."""
    kernel, items = history
    return ToolContext(kernel=kernel, history=items)


def call(ctx: ToolContext, tool: str, **args: Any) -> ToolResult:
    return run_tool(ToolCall(tool=tool, args=args), ctx)


def answer(ctx: ToolContext, tool: str, **args: Any) -> str:
    result = call(ctx, tool, **args)
    assert result.ok, result.text
    assert result.error is None and result.tool == tool
    return result.text


# -- the registry ----------------------------------------------------------------------------------------


def test_tool_names_are_pinned() -> None:
    # The env maps a Discrete action index to a name through this order: never reorder, only append.
    assert TOOL_NAMES == (
        "list_variables",
        "inspect_variable",
        "dataframe_head",
        "dataframe_info",
        "dataframe_describe",
        "memory_usage",
        "get_source",
        "recent_executions",
        "try_cell",
    )
    assert tuple(TOOLS) == TOOL_NAMES
    assert all(TOOLS[name].name == name for name in TOOL_NAMES)


def test_tool_errors_belong_to_the_exception_tree() -> None:
    assert issubclass(ToolError, ActionError)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_tool_is_described_for_a_model(name: str) -> None:
    tool = TOOLS[name]
    assert len(tool.description) > 40
    assert tool.args_model.model_config.get("extra") == "forbid"
    for field, info in tool.args_model.model_fields.items():
        assert info.description, f"{name}.{field} has no description"


def test_tool_call_forbids_unknown_fields() -> None:
    assert ToolCall(tool="list_variables").args == {}
    with pytest.raises(ValueError, match="arguments"):
        ToolCall.model_validate({"tool": "list_variables", "arguments": {}})


def test_context_checks_its_bounds(history: tuple[Kernel, list[HistoryItem]]) -> None:
    with pytest.raises(ValueError, match="max_chars"):
        ToolContext(kernel=history[0], max_chars=10)
    with pytest.raises(ValueError, match="max_rows"):
        ToolContext(kernel=history[0], max_rows=0)


def describe_tools() -> str:
    """The tools and their arguments as a prompt of an agent without tool calling would list them."""
    entries = []
    for tool in TOOLS.values():
        lines = [f"- {signature(tool)}: {tool.description}"]
        lines += [f"    {name}: {argument_description(info)}" for name, info in tool.args_model.model_fields.items()]
        entries.append("\n".join(lines))
    return "\n".join(entries)


def test_describe_tools_lists_every_tool_with_its_arguments() -> None:
    text = describe_tools()
    for name in TOOL_NAMES:
        assert f"- {name}(" in text
    assert "dataframe_head(name: str, n: int = 5)" in text
    assert "n: How many first rows to show (1 to 50)." in text
    assert "list_variables()" in text


# -- each tool on a realistic state ----------------------------------------------------------------------


def test_list_variables_is_a_table_of_user_variables(ctx: ToolContext) -> None:
    text = answer(ctx, "list_variables")
    lines = text.splitlines()
    assert lines[0].startswith("12 user variables (modules not listed)")
    assert lines[1].split() == ["name", "type", "size", "shape/len"]
    rows = {line.split()[0]: line for line in lines[2:]}
    assert {"frame", "arr", "model", "config", "area", "Point", "origin", "big"} <= set(rows)
    assert "np" not in rows and "pd" not in rows
    assert "numpy.ndarray" in rows["arr"] and "7.8 KB" in rows["arr"] and "(100, 10)" in rows["arr"]
    assert "pandas.DataFrame" in rows["frame"] and "(4, 3)" in rows["frame"]
    assert "len 3" in rows["config"]
    assert "1.0 MB" in rows["big"] and "len 100000" in rows["big"]
    assert "sklearn.linear_model._base.LinearRegression" in rows["model"]


def test_list_variables_says_when_rows_are_left_out(ctx: ToolContext) -> None:
    text = answer(ToolContext(kernel=ctx.kernel, max_rows=3), "list_variables")
    assert text.startswith("12 user variables, the first 3 by name")
    assert len(text.splitlines()) == 2 + 3


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("arr", ["arr: numpy.ndarray", "shape (100, 10)", "dtype float64", "size 7.8 KB", "array([[  0.,"]),
        ("frame", ["frame: pandas.DataFrame", "shape (4, 3)", "column dtypes: city", "temp float64", "Kyiv"]),
        ("wide", ["wide: pandas.DataFrame", "shape (30, 60)", "column dtypes (first 50 of 60): column_0 float64"]),
        ("model", ["model: sklearn.linear_model._base.LinearRegression", "LinearRegression()"]),
        ("config", ["config: dict", "len 3", "'layers': [64, 32]"]),
        ("origin", ["origin: Point", "<__main__.Point object at"]),
        ("area", ["area: function", "<function area at"]),
    ],
)
def test_inspect_variable(ctx: ToolContext, name: str, expected: list[str]) -> None:
    text = answer(ctx, "inspect_variable", name=name)
    for fragment in expected:
        assert fragment in text


def test_dataframe_head(ctx: ToolContext) -> None:
    text = answer(ctx, "dataframe_head", name="frame", n=2)
    assert text.splitlines() == [
        "frame.head(2):",
        "   city  temp  visits",
        "0  Oslo   3.5      10",
        "1  Rome  18.0      25",
    ]


def test_dataframe_info(ctx: ToolContext) -> None:
    text = answer(ctx, "dataframe_info", name="frame")
    assert text.startswith("frame.info():\n")
    assert "RangeIndex: 4 entries" in text and "4 non-null" in text and "memory usage" in text


def test_dataframe_describe(ctx: ToolContext) -> None:
    text = answer(ctx, "dataframe_describe", name="frame")
    assert text.startswith("frame.describe():\n")
    assert "mean" in text and "12.750000" in text and "city" not in text


def test_memory_usage(ctx: ToolContext) -> None:
    text = answer(ctx, "memory_usage")
    lines = text.splitlines()
    assert lines[0].startswith("kernel process memory (resident): ") and lines[0].endswith(" MB")
    assert lines[1].startswith("user variables: ") and "in total" in lines[1]
    assert lines[3].split() == ["name", "type", "size", "share"]
    assert lines[4].split()[0] == "big", "the largest variable comes first"


class CountingKernel:
    """The module's kernel, counting the introspection requests the tools make (of its ``introspect`` part)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel, self.asked = kernel, []
        self.introspect = CountingIntrospection(kernel, self.asked)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


class CountingIntrospection:
    """A kernel's introspection part, noting each ``list_variables`` and ``memory`` asked of it."""

    def __init__(self, kernel: Kernel, asked: list[str]) -> None:
        self.part, self.asked = kernel.introspect, asked

    def __getattr__(self, name: str) -> Any:
        if name in ("list_variables", "memory"):
            self.asked.append(name)
        return getattr(self.part, name)


def test_memory_usage_from_a_listing_kept_in_the_state_is_the_kernels_own_answer(ctx: ToolContext) -> None:
    """With the state's answers kept, recorded sizes for every variable and the recorded memory shown,
    memory_usage after list_variables asks the kernel nothing and says exactly what the kernel would."""
    kernel = ctx.kernel
    sizes = {row.name: row.size_bytes + 7 for row in kernel.introspect.list_variables(limit=1000).variables}
    recorded = {"recorded_sizes": sizes, "recorded_memory": 123_456_789, "history": ctx.history}
    asked_each_time = answer(ToolContext(kernel=kernel, **recorded), "memory_usage")
    counting = CountingKernel(kernel)  # type: ignore[arg-type]
    kept = ToolContext(kernel=counting, answers={}, **recorded)  # type: ignore[arg-type]
    answer(kept, "list_variables")
    assert answer(kept, "memory_usage") == asked_each_time
    assert counting.asked == ["list_variables"]
    # a variable whose size was not recorded: the kernel measures it, so it is asked
    partial = ToolContext(kernel=counting, answers={}, **{**recorded, "recorded_sizes": dict(list(sizes.items())[1:])})  # type: ignore[arg-type]
    answer(partial, "list_variables")
    answer(partial, "memory_usage")
    assert counting.asked[-2:] == ["list_variables", "memory"]


def test_answers_kept_by_a_state_server_are_dropped_when_its_context_is_handed_out() -> None:
    """Whoever holds a context from ``tool_context()`` may run code in the kernel: the answers kept so far
    are forgotten, so the next tool call sees the change."""
    from themisto_env.env.core import ThemistoEnv

    env = ThemistoEnv(task="next-cell", observation="tools")
    try:
        env.reset(seed=3)
        env.step(ToolCall(tool="list_variables"))
        env.episode.tool_context().kernel.execute("added_by_hand = [1, 2, 3]")
        obs, *_ = env.step(ToolCall(tool="list_variables"))
        assert "added_by_hand" in obs["tool_result"]
    finally:
        env.close()


def test_get_source_of_a_function_comes_from_the_kernel(ctx: ToolContext) -> None:
    text = answer(ctx, "get_source", name="area")
    assert text == (
        "# source of area, from the kernel:\ndef area(r):\n    '''Area of a circle.'''\n    return 3.14159 * r * r\n"
    )


def test_get_source_of_an_instance_names_its_class(ctx: ToolContext) -> None:
    text = answer(ctx, "get_source", name="model")
    assert text.startswith("# source of model (the class LinearRegression), from the kernel:\n")


def test_get_source_of_a_class_falls_back_to_the_history(ctx: ToolContext) -> None:
    # IPython cannot give the source of a class defined in a cell; the history has it.
    for name, what in (("Point", "'Point'"), ("origin", "'origin' (an instance of Point)")):
        text = answer(ctx, "get_source", name=name)
        header, source = text.split("\n", 2)[:2], text.split("\n", 2)[2]
        assert header[0].startswith(f"# The kernel cannot show the source of {what} (")
        assert header[1] == "# From the history: the most recent definition, in execution [3]:"
        assert source == "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y"


def test_get_source_after_a_restore_in_a_fresh_kernel_comes_from_the_history(local_kernel: Kernel) -> None:
    cells = ["def area(r):\n    return r * r", "%time x = 1\ndef area(r):\n    return 3.14 * r * r\n\nx = 2"]
    for cell in cells:
        assert local_kernel.execute(cell).status == "ok"
    items = [HistoryItem(index, cell, "") for index, cell in enumerate(cells)]
    ctx = ToolContext(kernel=local_kernel, history=items)
    assert answer(ctx, "get_source", name="area").startswith("# source of area, from the kernel:")

    snapshot = local_kernel.snapshots.save()
    local_kernel.restart()
    assert "area" in local_kernel.snapshots.restore(snapshot).names
    text = answer(ctx, "get_source", name="area")
    assert "The kernel cannot show the source of 'area'" in text
    assert text.endswith("in execution [1]:\ndef area(r):\n    return 3.14 * r * r")


def test_get_source_of_a_name_defined_nowhere_is_an_error(ctx: ToolContext) -> None:
    result = call(ctx, "get_source", name="aera")
    assert not result.ok
    assert result.error == (
        "no variable named 'aera' in the kernel. Did you mean area? "
        "No `def aera` or `class aera` ran in the history either."
    )


def test_find_definition_takes_the_latest_and_reads_ipython_cells() -> None:
    items = [
        HistoryItem(0, "def f(x):\n    return x"),
        HistoryItem(1, "%matplotlib inline\nimport functools\n@functools.cache\ndef f(x):\n    return 2 * x\nf(1)"),
        HistoryItem(2, "files = !ls\nclass K:\n    def f(self):\n        pass\n\nK()"),
        HistoryItem(3, "try:\n    def g(): return 1\nexcept ImportError:\n    def g(): return 2\n"),
        HistoryItem(4, "%%time\nasync def h():\n    pass\n"),
        HistoryItem(5, "y = (1 +\n% 2)\n@decorate\ndef w(a):\n    return a\n\nw(1)\n"),
    ]
    expected = {
        "f": (1, "@functools.cache\ndef f(x):\n    return 2 * x"),
        "K": (2, "class K:\n    def f(self):\n        pass"),
        "g": (3, "    def g(): return 2"),
        "h": (4, "async def h():\n    pass"),
        "w": (5, "@decorate\ndef w(a):\n    return a"),  # does not parse: found by indentation
    }
    for name, (index, source) in expected.items():
        found = find_definition(name, items)
        assert found is not None and (found.index, found.source) == (index, source), name
    assert find_definition("self", items) is None
    assert find_definition("x", items) is None


def test_recent_executions(ctx: ToolContext) -> None:
    text = answer(ctx, "recent_executions", n=2)
    assert text.startswith("The last 2 of 6 executions, oldest first:\n--- execution [4] ---\nIn:\nbig = list")
    assert text.endswith("--- execution [5] ---\nIn:\n1 / 0\nOut:\nZeroDivisionError: division by zero")
    assert "--- execution [4] ---" in text and "Out:\n(no output)" in text
    assert answer(ctx, "recent_executions", n=20).startswith("The last 6 of 6 executions")
    assert "--- execution [1] ---\nIn:\nframe = " in answer(ctx, "recent_executions", n=5)
    assert "0  Oslo   3.5      10" in answer(ctx, "recent_executions", n=5)


def test_recent_executions_of_an_empty_history(ctx: ToolContext) -> None:
    assert answer(ToolContext(kernel=ctx.kernel), "recent_executions") == "No cells have been executed yet."


def test_recent_executions_cuts_each_cell_and_keeps_the_end_of_outputs(ctx: ToolContext) -> None:
    items = [
        HistoryItem(7, "print('a')\n" * 500, "a\n" * 500),
        HistoryItem(8, "raise_deep()", "Traceback\n" + "  frame line\n" * 400 + "KeyError: 'price'"),
    ]
    text = answer(ToolContext(kernel=ctx.kernel, history=items, max_chars=1000), "recent_executions", n=2)
    assert len(text) <= 1000
    assert "--- execution [7] ---" in text and "--- execution [8] ---" in text
    assert "more characters]" in text and "characters cut] ..." in text
    assert text.endswith("KeyError: 'price'"), "the end of an output (the error) is kept"


# -- bounds ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("list_variables", {}),
        ("inspect_variable", {"name": "big", "max_chars": 4000}),
        ("inspect_variable", {"name": "long_text", "max_chars": 4000}),
        ("inspect_variable", {"name": "wide", "max_chars": 4000}),
        ("dataframe_head", {"name": "wide", "n": 50}),
        ("dataframe_info", {"name": "wide"}),
        ("dataframe_describe", {"name": "wide"}),
        ("memory_usage", {}),
        ("get_source", {"name": "model"}),
        ("recent_executions", {"n": 20}),
    ],
)
@pytest.mark.parametrize("max_chars", [300, 3000])
def test_every_result_is_bounded_with_a_marker(
    ctx: ToolContext, tool: str, args: dict[str, Any], max_chars: int
) -> None:
    small = ToolContext(kernel=ctx.kernel, history=ctx.history, max_chars=max_chars)
    text = answer(small, tool, **args)
    assert len(text) <= max_chars
    unbounded = answer(ToolContext(kernel=ctx.kernel, history=ctx.history, max_chars=100_000), tool, **args)
    if len(unbounded) > max_chars:  # a marker, or (a listing) the rows that fit, said in its title
        marked = ("more characters]", "characters cut]", "value (shortened", "by name (modules not listed)")
        assert any(mark in text for mark in marked), text


def test_huge_values_are_cut_by_max_chars(ctx: ToolContext) -> None:
    for name in ("big", "long_text"):
        text = answer(ctx, "inspect_variable", name=name, max_chars=200)
        assert "\nvalue (shortened, ... marks the cuts):\n" in text
        assert len(text.split("\n", 3)[3]) < 300
    assert "value:\n" in answer(ctx, "inspect_variable", name="config", max_chars=200)


def test_error_texts_are_bounded_too(ctx: ToolContext) -> None:
    result = call(ToolContext(kernel=ctx.kernel, max_chars=200), "x" * 5000)
    assert not result.ok and len(result.text) <= 200


# -- the agent's mistakes are answered, not raised -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("lst_vars", "list_variables"),
        ("df_head", "dataframe_head"),
        ("source", "get_source"),
        ("Memory", "memory_usage"),
    ],
)
def test_unknown_tool_suggests_the_nearest(ctx: ToolContext, name: str, nearest: str) -> None:
    result = call(ctx, name)
    assert not result.ok and result.tool == name
    assert result.error is not None and f"Did you mean {nearest!r}?" in result.error
    assert result.text.startswith(f"Error: unknown tool {name!r}.")
    assert result.text.endswith(f"The tools are: {', '.join(n for n in TOOL_NAMES if n != 'try_cell')}.")


def test_unknown_tool_lists_the_tools_of_its_task(ctx: ToolContext) -> None:
    """Without ``try_code`` (the output task) try_cell is neither listed nor suggested; with it, it is."""
    result = call(ctx, "try_cel")
    assert "try_cell" not in result.text
    trying = dataclasses.replace(ctx, try_code=lambda code: None)  # type: ignore[arg-type, return-value]
    result = call(trying, "try_cel")
    assert "Did you mean 'try_cell'?" in result.text and result.text.endswith(f"{', '.join(TOOL_NAMES)}.")


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("inspect_variable", {}, "'name' is required"),
        ("inspect_variable", {"name": ""}, "'name': String should have at least 1 character"),
        ("inspect_variable", {"name": "arr", "max_chars": 10}, "'max_chars': Input should be greater than"),
        ("dataframe_head", {"name": "frame", "n": "many"}, "'n': Input should be a valid integer"),
        ("dataframe_head", {"name": "frame", "n": 500}, "'n': Input should be less than or equal to 50 (got 500)"),
        ("dataframe_head", {"name": ["frame"]}, "'name': Input should be a valid string"),
        ("list_variables", {"limit": 5}, "'limit' is not an argument of this tool"),
        ("recent_executions", {"count": 2}, "'count' is not an argument of this tool"),
    ],
)
def test_bad_arguments_are_answered_naming_the_field(
    ctx: ToolContext, tool: str, args: dict[str, Any], message: str
) -> None:
    result = call(ctx, tool, **args)
    assert not result.ok
    assert result.error is not None and result.error.startswith(f"invalid arguments for {tool}: ")
    assert message in result.error
    assert "Usage: " + tool + "(" in result.text


@pytest.mark.parametrize(
    "tool", ["inspect_variable", "dataframe_head", "dataframe_info", "dataframe_describe", "get_source"]
)
def test_unknown_variables_are_answered_with_the_nearest_names(ctx: ToolContext, tool: str) -> None:
    result = call(ctx, tool, name="fram")
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("no variable named 'fram' in the kernel. Did you mean frame")


def test_a_variable_of_the_wrong_kind_is_answered(ctx: ToolContext) -> None:
    result = call(ctx, "dataframe_head", name="arr")
    assert not result.ok and result.error == "'arr' is a numpy.ndarray, not a pandas DataFrame or Series."


def test_a_helper_failing_on_the_users_object_is_answered(ctx: ToolContext) -> None:
    # pandas raises on describe() of a frame without columns: the agent's answer, not a broken kernel.
    result = call(ctx, "dataframe_describe", name="empty")
    assert not result.ok
    assert result.error == "the kernel could not compute this: ValueError: Cannot describe a DataFrame without columns"


def test_user_objects_that_break_the_helper_are_answered_and_the_kernel_kept(local_kernel: Kernel) -> None:
    local_kernel.execute(
        "import pandas as pd\n"
        "class Loud:\n    def __repr__(self):\n        raise RuntimeError('no repr for you')\n"
        "class Endless(list):\n    def __len__(self):\n        raise RuntimeError('no len for you')\n"
        "class Sulky(pd.DataFrame):\n    def describe(self, *args, **kwargs):\n"
        "        raise RuntimeError('no stats for you')\n"
        "loud, endless, sulky = Loud(), Endless([1, 2]), Sulky({'x': [1, 2]})"
    )
    ctx = ToolContext(kernel=local_kernel)
    pid, before = local_kernel.launcher.pid(), local_kernel.introspect.namespace_state()
    endless = call(ctx, "inspect_variable", name="endless")
    assert not endless.ok and endless.error == "the kernel could not compute this: RuntimeError: no len for you"
    sulky = call(ctx, "dataframe_describe", name="sulky")
    assert not sulky.ok and sulky.error == "the kernel could not compute this: RuntimeError: no stats for you"
    assert "<repr failed: RuntimeError: no repr for you>" in answer(ctx, "inspect_variable", name="loud")
    listing = answer(ctx, "list_variables")
    assert all(name in listing for name in ("loud", "endless", "sulky"))
    assert "sulky" in answer(ctx, "memory_usage") and "x" in answer(ctx, "dataframe_head", name="sulky")
    assert local_kernel.launcher.pid() == pid and local_kernel.restarts == 0
    assert local_kernel.introspect.namespace_state() == before


@pytest.mark.parametrize(
    "raw", [{"tool": "list_variables", "args": [1]}, {"name": "list_variables"}, "list_variables", None]
)
def test_a_malformed_call_is_answered(ctx: ToolContext, raw: Any) -> None:
    result = run_tool(raw, ctx)
    assert not result.ok and result.error is not None and result.error.startswith("malformed tool call")


def test_a_call_may_be_given_as_a_mapping(ctx: ToolContext) -> None:
    assert run_tool({"tool": "dataframe_head", "args": {"name": "frame"}}, ctx).ok


# -- read-only -------------------------------------------------------------------------------------------


def every_call() -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = [("list_variables", {}), ("memory_usage", {})]
    for name in ("frame", "arr", "model", "config", "area", "Point", "origin", "big", "empty", "missing"):
        calls += [
            ("inspect_variable", {"name": name}),
            ("dataframe_head", {"name": name, "n": 3}),
            ("dataframe_info", {"name": name}),
            ("dataframe_describe", {"name": name}),
            ("get_source", {"name": name}),
        ]
    calls += [("recent_executions", {"n": 20}), ("no_such_tool", {}), ("dataframe_head", {"n": -1})]
    return calls


def test_tools_are_read_only(ctx: ToolContext) -> None:
    kernel = ctx.kernel
    before = kernel.introspect.namespace_state()
    results = [call(ctx, tool, **args) for tool, args in every_call()]
    tools = {tool.name: tool for tool in langchain_tools(lambda: ctx)}
    results_lc = [tools[name].invoke(dict(args)) for name, args in every_call() if name in tools]
    after = kernel.introspect.namespace_state()
    assert after == before
    assert before.execution_count == len(CELLS) + 1
    assert any(r.ok for r in results) and any(not r.ok for r in results) and results_lc


# -- infrastructure errors propagate ---------------------------------------------------------------------


def test_a_closed_kernel_raises(snapshot_dir: Path) -> None:
    kernel = Kernel("local", snapshot_dir=snapshot_dir)
    with pytest.raises(InfrastructureError, match="not started"):
        run_tool(ToolCall(tool="list_variables"), ToolContext(kernel=kernel))


def test_a_dead_kernel_raises_through_run_tool_and_langchain(local_kernel: Kernel) -> None:
    with pytest.raises(KernelDiedError):
        local_kernel.execute("import os; os._exit(1)")
    ctx = ToolContext(kernel=local_kernel)
    with pytest.raises(KernelDiedError):
        run_tool(ToolCall(tool="inspect_variable", args={"name": "x"}), ctx)
    seen: list[ToolResult] = []
    tool = langchain_tools(lambda: ctx, on_call=lambda c, r: seen.append(r))[0]
    with pytest.raises(KernelDiedError):
        tool.invoke({})
    assert seen == [], "a call the infrastructure failed is not counted as answered"
    # Tools that need no kernel still answer.
    assert run_tool(ToolCall(tool="recent_executions"), ctx).ok


# -- langchain-core tools --------------------------------------------------------------------------------


def counted(ctx: ToolContext) -> tuple[list[BaseTool], list[tuple[ToolCall, ToolResult]]]:
    seen: list[tuple[ToolCall, ToolResult]] = []
    return langchain_tools(lambda: ctx, on_call=lambda c, r: seen.append((c, r))), seen


def test_langchain_tools_mirror_the_registry(ctx: ToolContext) -> None:
    tools, _ = counted(ctx)
    assert [tool.name for tool in tools] == list(TOOL_NAMES)
    for tool in tools:
        spec = TOOLS[tool.name]
        assert isinstance(tool, StructuredTool)
        assert tool.description == spec.description
        assert tool.args_schema is spec.args_model
        assert set(tool.args) == set(spec.args_model.model_fields)
        parameters = convert_to_openai_tool(tool)["function"]["parameters"]
        schema = spec.args_model.model_json_schema()
        assert parameters["properties"] == {
            name: {key: value for key, value in field.items() if key != "title"}
            for name, field in schema["properties"].items()
        }
        assert sorted(parameters.get("required", [])) == sorted(schema.get("required", []))
    head = next(tool for tool in tools if tool.name == "dataframe_head")
    properties = convert_to_openai_tool(head)["function"]["parameters"]["properties"]
    assert properties["n"] == {
        "default": 5,
        "description": "How many first rows to show.",
        "maximum": 50,
        "minimum": 1,
        "type": "integer",
    }


def test_langchain_invoke_returns_the_text_and_is_counted(ctx: ToolContext) -> None:
    tools, seen = counted(ctx)
    head = tools[TOOL_NAMES.index("dataframe_head")]
    text = head.invoke({"name": "frame", "n": 2})
    assert text == answer(ctx, "dataframe_head", name="frame", n=2)
    (call, result), *more = seen
    assert call == ToolCall(tool="dataframe_head", args={"name": "frame", "n": 2}) and not more
    assert (result.tool, result.ok, result.text) == ("dataframe_head", True, text)
    assert result.data == FrameView(name="frame", view="head", text=text.split("\n", 1)[1], n=2)
    assert tools[TOOL_NAMES.index("dataframe_info")].invoke("frame").startswith("frame.info():")
    assert tools[0].invoke({}).startswith("12 user variables")
    assert asyncio.run(head.ainvoke({"name": "frame", "n": 1})).startswith("frame.head(1):")


def test_langchain_answers_bad_calls_as_errors_and_counts_them(ctx: ToolContext) -> None:
    tools, seen = counted(ctx)
    head = tools[TOOL_NAMES.index("dataframe_head")]
    assert head.invoke({"name": "frame", "n": "many"}).startswith("Error: invalid arguments for dataframe_head: 'n'")
    message = head.invoke({"name": "fram", "type": "tool_call", "id": "call_7", "args": {"name": "fram"}})
    assert isinstance(message, ToolMessage)
    assert message.status == "error" and message.tool_call_id == "call_7"
    assert str(message.content).startswith("Error: no variable named 'fram'")
    listing = tools[0].invoke({"type": "tool_call", "id": "call_8", "name": "list_variables", "args": {"x": 1}})
    assert listing.status == "error" and "'x' is not an argument" in str(listing.content)
    assert [(c.tool, r.ok) for c, r in seen] == [("dataframe_head", False)] * 2 + [("list_variables", False)]


def test_langchain_tools_read_the_context_at_call_time(ctx: ToolContext) -> None:
    current = {"ctx": ToolContext(kernel=ctx.kernel, history=ctx.history[:1])}
    recent = langchain_tools(lambda: current["ctx"])[TOOL_NAMES.index("recent_executions")]
    assert recent.invoke({"n": 5}).startswith("The last 1 of 1 executions")
    current["ctx"] = ctx
    assert recent.invoke({"n": 5}).startswith("The last 5 of 6 executions")


class ToolCallingFakeModel(GenericFakeChatModel):
    """GenericFakeChatModel with ``bind_tools``: records the tool schemas a provider would receive."""

    bound: list[dict[str, Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        self.bound = [convert_to_openai_tool(tool) for tool in tools]
        return self.bind(tools=self.bound, **kwargs)


def test_a_fake_chat_model_drives_a_tool_call(ctx: ToolContext) -> None:
    tools, seen = counted(ctx)
    by_name = {tool.name: tool for tool in tools}
    reply = AIMessage(
        content="",
        tool_calls=[
            {"name": "dataframe_head", "args": {"name": "frame", "n": 2}, "id": "call_1"},
            {"name": "inspect_variable", "args": {"name": "confg"}, "id": "call_2"},
        ],
    )
    model = ToolCallingFakeModel(messages=iter([reply]))
    message = model.bind_tools(tools).invoke("What does frame hold?")
    assert [schema["function"]["name"] for schema in model.bound] == list(TOOL_NAMES)
    assert isinstance(message, AIMessage) and len(message.tool_calls) == 2

    results = [by_name[tool_call["name"]].invoke(tool_call) for tool_call in message.tool_calls]
    assert all(isinstance(result, ToolMessage) for result in results)
    assert results[0].tool_call_id == "call_1" and results[0].status == "success"
    assert results[0].content == answer(ctx, "dataframe_head", name="frame", n=2)
    assert results[1].tool_call_id == "call_2" and results[1].status == "error"
    assert "Did you mean config" in results[1].content
    assert [(c.tool, c.args, r.ok) for c, r in seen] == [
        ("dataframe_head", {"name": "frame", "n": 2}, True),
        ("inspect_variable", {"name": "confg"}, False),
    ]
