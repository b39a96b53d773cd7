"""The observation tools: their argument models, what each does, and the registry in its fixed order.

Every tool is read-only: the kernel is asked through its introspection part (`kernel.introspect.list_variables`,
...: silent executions that leave the user namespace, ``_``, ``Out`` and the execution counter alone), and
the history is the env's own. ``try_cell`` (`themisto_env.env.tools._try`) runs the agent's candidate in a
disposable kernel of its own and never touches this kernel either.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.env.tools._history import find_definition
from themisto_env.env.tools._models import ObservationTool, ToolContext, ToolError, ToolSpec
from themisto_env.env.tools._text import clip, human_size, shape_or_length, table
from themisto_env.env.tools._try import TryCellArgs, try_cell
from themisto_env.errors import HelperError, IntrospectionRefused
from themisto_env.sandbox.kernel.answers import FrameViewName, MemoryReport, MemoryRow, VariableDetail, VariableListing

_NAME_DESCRIPTION = "The variable's name in the kernel, as list_variables shows it."


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(_Args):
    """This tool takes no arguments."""


class InspectVariableArgs(_Args):
    """Arguments of inspect_variable."""

    name: str = Field(min_length=1, max_length=200, description=_NAME_DESCRIPTION)
    max_chars: int = Field(1000, ge=50, le=4000, description="The longest value text (repr) to show.")


class DataFrameArgs(_Args):
    """Arguments of dataframe_info and dataframe_describe."""

    name: str = Field(min_length=1, max_length=200, description="The name of a pandas DataFrame or Series.")


class DataFrameHeadArgs(DataFrameArgs):
    """Arguments of dataframe_head."""

    n: int = Field(5, ge=1, le=50, description="How many first rows to show.")


class SourceArgs(_Args):
    """Arguments of get_source."""

    name: str = Field(
        min_length=1,
        max_length=200,
        description="The name of a function or class (for another object, its class's source is shown).",
    )


class RecentExecutionsArgs(_Args):
    """Arguments of recent_executions."""

    n: int = Field(3, ge=1, le=20, description="How many of the most recent executions to show.")


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _ask(method: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Call a kernel introspection method; its refusals and its failures on the user's data (the kernel is
    fine either way) become `ToolError`, the agent's answer. Infrastructure errors propagate."""
    try:
        return method(*args, **kwargs)
    except IntrospectionRefused as exc:  # no such name (with the nearest), not a DataFrame, no source
        raise ToolError(exc.detail) from exc
    except HelperError as exc:  # the helper raised on the user's own object
        raise ToolError(f"the kernel could not compute this: {exc.detail}") from exc


def _listing(ctx: ToolContext) -> VariableListing:
    """The kernel's listing of the user's variables (asked once per served state: see ``ctx.answers``)."""
    key = f"list_variables/{ctx.max_rows}"
    if ctx.answers is not None and key in ctx.answers:
        return ctx.answers[key]  # type: ignore[no-any-return]
    answer = _ask(ctx.kernel.introspect.list_variables, limit=ctx.max_rows, known=ctx.recorded_sizes)
    if ctx.answers is not None:
        ctx.answers[key] = answer
    return answer


def list_variables(ctx: ToolContext, args: NoArgs) -> str:
    """A table of the user's variables: name, type, size, shape or length."""
    answer = _listing(ctx)
    rows = answer.variables
    if not rows:
        return "No user variables are defined (imported modules are not listed)."
    total = answer.total
    shown = f", the first {len(rows)} by name" if len(rows) < total else ""
    lines = [
        (row.name, row.type, human_size(ctx.size_of(row.name, row.size_bytes)), shape_or_length(row.shape, row.length))
        for row in rows
    ]
    return f"{total} user variables{shown} (modules not listed):\n" + table(
        ("name", "type", "size", "shape/len"), lines
    )


def inspect_variable(ctx: ToolContext, args: InspectVariableArgs) -> str:
    """One variable: type, shape, dtype, length, size, column dtypes, and a bounded repr."""
    limit = max(50, min(args.max_chars, ctx.max_chars - 400))
    info = _ask(ctx.kernel.introspect.inspect_variable, args.name, max_chars=limit)
    facts = [f"size {human_size(ctx.size_of(info.name, info.size_bytes))}"]
    if info.shape is not None:
        facts.insert(0, f"shape {shape_or_length(info.shape, None)}")
    elif info.length is not None:
        facts.insert(0, f"len {info.length}")
    if info.dtype:
        facts.append(f"dtype {info.dtype}")
    lines = [f"{info.name}: {info.type}", ", ".join(facts)]
    dtypes = info.dtypes
    if dtypes:
        columns = ", ".join(f"{column} {dtype}" for column, dtype in dtypes.items())
        shape = info.shape or ()
        label = (
            f"column dtypes (first {len(dtypes)} of {shape[1]})"
            if len(shape) == 2 and shape[1] > len(dtypes)
            else "column dtypes"
        )
        lines.append(clip(f"{label}: {columns}", 400))
    lines += ["value (shortened, ... marks the cuts):" if _shortened(info) else "value:", info.repr]
    return "\n".join(lines)


def _shortened(info: VariableDetail) -> bool:
    """Whether the helper's repr left items or characters out (its repr of builtins marks cuts with ...)."""
    length, text = info.length, info.repr
    if length is None or info.type not in ("str", "bytes", "list", "tuple", "dict", "set", "frozenset"):
        return False
    return len(text) < length if info.type in ("str", "bytes") else length > 50 and "..." in text


def _dataframe_view(ctx: ToolContext, name: str, view: FrameViewName, n: int = 5) -> str:
    return _ask(ctx.kernel.introspect.dataframe, name, view, n=n, max_chars=ctx.max_chars).text


def dataframe_head(ctx: ToolContext, args: DataFrameHeadArgs) -> str:
    """The first rows of a DataFrame or Series."""
    return f"{args.name}.head({args.n}):\n" + _dataframe_view(ctx, args.name, "head", args.n)


def dataframe_info(ctx: ToolContext, args: DataFrameArgs) -> str:
    """``DataFrame.info()``: index, columns, non-null counts, dtypes, memory."""
    return f"{args.name}.info():\n" + _dataframe_view(ctx, args.name, "info")


def dataframe_describe(ctx: ToolContext, args: DataFrameArgs) -> str:
    """``DataFrame.describe()``: summary statistics of the numeric columns."""
    return f"{args.name}.describe():\n" + _dataframe_view(ctx, args.name, "describe")


def _memory_from_listing(ctx: ToolContext) -> MemoryReport | None:
    """The memory report as the kernel would give it, from a listing already given in this state, where it
    holds every variable and every size it shows is the recorded one, and the recorded memory is shown (the
    live figure is the only thing the listing lacks); None otherwise (the kernel is asked)."""
    listing = (ctx.answers or {}).get(f"list_variables/{ctx.max_rows}")
    if listing is None or ctx.recorded_memory is None or ctx.recorded_sizes is None:
        return None
    rows = listing.variables
    if len(rows) != listing.total or any(row.name not in ctx.recorded_sizes for row in rows):
        return None
    sized: list[MemoryRow] = [MemoryRow(name=r.name, size_bytes=r.size_bytes, type=r.type) for r in rows]
    sized.sort(key=lambda row: -row.size_bytes)
    return MemoryReport(
        kernel_rss_bytes=None, variables_total_bytes=sum(r.size_bytes for r in sized), variables=tuple(sized)
    )


def memory_usage(ctx: ToolContext, args: NoArgs) -> str:
    """The kernel's resident memory and the largest user variables."""
    answer = _memory_from_listing(ctx) or _ask(ctx.kernel.introspect.memory, top=10_000, known=ctx.recorded_sizes)
    sized = sorted(((ctx.size_of(r.name, r.size_bytes), r) for r in answer.variables), key=lambda p: (-p[0], p[1].name))
    total = sum(size for size, _ in sized)
    rss = ctx.recorded_memory if ctx.recorded_memory is not None else answer.kernel_rss_bytes
    lines = [
        f"kernel process memory (resident): {human_size(rss)}",
        f"user variables: {human_size(total)} in total (modules not counted)",
    ]
    rows = sized[: min(ctx.max_rows, 15)]
    if rows:
        lines.append("largest variables:")
        lines.append(
            table(
                ("name", "type", "size", "share"),
                [(r.name, r.type, human_size(size), f"{100 * size / total:.0f}%" if total else "") for size, r in rows],
            )
        )
    return "\n".join(lines)


def get_source(ctx: ToolContext, args: SourceArgs) -> str:
    """The source of a function or class: from the kernel, else its latest definition in the history.

    IPython cannot give the source of classes defined in cells, and a kernel restored from a snapshot has
    lost the cells' source lines, so the history is often the only place left. For an instance whose
    class is the user's, the class's definition is looked up.
    """
    name = args.name
    try:
        source = _ask(ctx.kernel.introspect.source, name, max_chars=ctx.max_chars).source
    except ToolError as exc:
        found, what = find_definition(name, ctx.history), f"of {name!r}"
        if found is None and (cls := _class_name(ctx, name)) not in (None, name):
            found, what = find_definition(cls, ctx.history), f"of {name!r} (an instance of {cls})"
        if found is None:
            raise ToolError(f"{exc} No `def {name}` or `class {name}` ran in the history either.") from exc
        return (
            f"# The kernel cannot show the source {what} ({exc}).\n"
            f"# From the history: the most recent definition, in execution [{found.index}]:\n{found.source}"
        )
    header = _DEFINITION_LINE.search(source)
    if header is None or header["name"] == name:
        return f"# source of {name}, from the kernel:\n{source}"
    kind = "class" if header["kind"] == "class" else "function"
    return f"# source of {name} (the {kind} {header['name']}), from the kernel:\n{source}"


_DEFINITION_LINE = re.compile(r"^\s*(?P<kind>class|def|async\s+def)\s+(?P<name>\w+)", re.MULTILINE)


def _class_name(ctx: ToolContext, name: str) -> str | None:
    """The unqualified class name of a variable, or None when the kernel does not define it."""
    try:
        info = _ask(ctx.kernel.introspect.inspect_variable, name, max_chars=50)
    except ToolError:
        return None
    return info.type.rsplit(".", 1)[-1]


def recent_executions(ctx: ToolContext, args: RecentExecutionsArgs) -> str:
    """The last ``n`` executions with their code and output, oldest first, each bounded."""
    history = list(ctx.history)
    if not history:
        return "No cells have been executed yet."
    items = history[-args.n :]
    header = f"The last {len(items)} of {len(history)} executions, oldest first:"
    budget = max((ctx.max_chars - len(header)) // len(items) - 60, 80)
    blocks = [header]
    for item in items:
        source, output = _share(item.source.strip("\n"), item.output.strip("\n") or "(no output)", budget)
        blocks.append(f"--- execution [{item.index}] ---\nIn:\n{source}\nOut:\n{output}")
    return "\n".join(blocks)


def _share(source: str, output: str, budget: int) -> tuple[str, str]:
    """Cut a cell's source and output to ``budget`` characters together, sharing the room fairly."""
    if len(source) + len(output) <= budget:
        return source, output
    half = budget // 2
    source_room = max(half, budget - len(output))
    output_room = max(budget - min(len(source), source_room), half)
    return clip(source, source_room), clip(output, output_room, keep="middle")


#: The tool that runs code: a candidate next cell, in a disposable kernel at the current state.
TRY_CELL = ObservationTool(
    "try_cell",
    "Try a candidate for the next cell (next-cell task only): run code in a disposable copy of the kernel "
    "in the current state (before the cell you predict) and see its outputs, whether it raised, and which "
    "variables it created, changed or deleted. The copy is thrown away after: the notebook's kernel is not "
    "changed. Use it to check and revise a prediction; it never shows the real next cell.",
    TryCellArgs,
    try_cell,
    read_only=False,
)

_TOOLS = (
    ObservationTool(
        "list_variables",
        "List the variables defined in the notebook's kernel (imported modules are left out): "
        "name, type, size in memory, and shape (arrays, DataFrames) or length (containers).",
        NoArgs,
        list_variables,
    ),
    ObservationTool(
        "inspect_variable",
        "Inspect one variable in the kernel: its type, shape, dtype, length, size in memory, the column "
        "dtypes of a DataFrame, and its value (repr), cut to max_chars.",
        InspectVariableArgs,
        inspect_variable,
    ),
    ObservationTool(
        "dataframe_head",
        "Show the first n rows of a pandas DataFrame or Series in the kernel (df.head(n)).",
        DataFrameHeadArgs,
        dataframe_head,
    ),
    ObservationTool(
        "dataframe_info",
        "Show df.info() of a pandas DataFrame or Series in the kernel: index, columns, non-null counts, "
        "dtypes and memory usage.",
        DataFrameArgs,
        dataframe_info,
    ),
    ObservationTool(
        "dataframe_describe",
        "Show df.describe() of a pandas DataFrame or Series in the kernel: count, mean, std, min, "
        "quartiles and max of the numeric columns.",
        DataFrameArgs,
        dataframe_describe,
    ),
    ObservationTool(
        "memory_usage",
        "Show the kernel process's memory and the largest variables with their sizes.",
        NoArgs,
        memory_usage,
    ),
    ObservationTool(
        "get_source",
        "Show the source code of a function or class defined in the notebook. When the kernel no longer "
        "has it, the most recent definition executed in the notebook is shown, marked as such.",
        SourceArgs,
        get_source,
    ),
    ObservationTool(
        "recent_executions",
        "Show the n most recently executed cells with their code and output, oldest first.",
        RecentExecutionsArgs,
        recent_executions,
    ),
    TRY_CELL,
)

#: The observation tools by name, in the fixed order of `TOOL_NAMES`: the one table every bridge's tools
#: come from (names, arguments, descriptions, read-only flag).
TOOLS: dict[str, ObservationTool] = {tool.name: tool for tool in _TOOLS}

#: The tool names in a fixed order: the env maps a `Discrete` action index to a name through it.
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)


def task_tools(task: str) -> tuple[ObservationTool, ...]:
    """The tools offered in a task, in `TOOL_NAMES` order: the read-only ones everywhere, those that run code
    in the next-cell task only (in the output task the cell is given, and running code would reveal the
    output the agent is asked to predict)."""
    return tuple(tool for tool in _TOOLS if tool.read_only or task == "next-cell")


class SubmitArgs(_Args):
    """Arguments of the submit tool."""

    prediction: str = Field(description="The predicted text: the next cell's source, or the cell's output.")


#: The prediction as a tool, for the bridges whose agents answer by calling a tool (TRL, verifiers): it
#: keeps the text, and the rollout's last one is scored. The gym env takes a `Prediction` action instead.
SUBMIT = ToolSpec(
    "submit",
    "Submit your prediction (the next cell's source, or the cell's output). The last one counts.",
    SubmitArgs,
    returns="A confirmation.",
)
