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

from themisto_env.env.tools._answers import RecentExecutions, ShownExecution, SourceAnswer
from themisto_env.env.tools._history import find_definition
from themisto_env.env.tools._models import ObservationTool, ToolContext, ToolError, ToolSpec
from themisto_env.env.tools._render import render
from themisto_env.env.tools._text import clip
from themisto_env.env.tools._try import TryCellArgs, try_cell
from themisto_env.errors import HelperError, IntrospectionRefused
from themisto_env.sandbox.kernel.answers import (
    FrameView,
    FrameViewName,
    MemoryReport,
    MemoryRow,
    VariableDetail,
    VariableListing,
)

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


def list_variables(ctx: ToolContext, args: NoArgs) -> VariableListing:
    """The user's variables: name, type, size (the recorded one where there is one), shape or length; the
    first rows by name whose lines fit in ``ctx.max_chars`` (``total`` counts them all)."""
    listing = _listing(ctx)
    text = render(listing)
    if len(text) <= ctx.max_chars:
        return listing
    fit = clip(text, ctx.max_chars).count("\n") - 2  # the title, the table's header and the cut marker
    return listing.model_copy(update={"variables": listing.variables[: max(fit, 0)]})


def inspect_variable(ctx: ToolContext, args: InspectVariableArgs) -> VariableDetail:
    """One variable: type, shape, dtype, length, size, column dtypes, and a bounded repr."""
    limit = max(50, min(args.max_chars, ctx.max_chars - 400))
    info = _ask(ctx.kernel.introspect.inspect_variable, args.name, max_chars=limit)
    return info.model_copy(update={"size_bytes": ctx.size_of(info.name, info.size_bytes)})


def dataframe_view(ctx: ToolContext, args: DataFrameHeadArgs | DataFrameArgs, view: FrameViewName) -> FrameView:
    """A view of a DataFrame or Series: ``head(n)``, ``info()`` or ``describe()``."""
    n = args.n if isinstance(args, DataFrameHeadArgs) else 5
    return _ask(ctx.kernel.introspect.dataframe, args.name, view, n=n, max_chars=ctx.max_chars)


def dataframe_head(ctx: ToolContext, args: DataFrameHeadArgs) -> FrameView:
    """The first rows of a DataFrame or Series."""
    return dataframe_view(ctx, args, "head")


def dataframe_info(ctx: ToolContext, args: DataFrameArgs) -> FrameView:
    """``DataFrame.info()``: index, columns, non-null counts, dtypes, memory."""
    return dataframe_view(ctx, args, "info")


def dataframe_describe(ctx: ToolContext, args: DataFrameArgs) -> FrameView:
    """``DataFrame.describe()``: summary statistics of the numeric columns."""
    return dataframe_view(ctx, args, "describe")


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
    sized = tuple(MemoryRow(name=r.name, size_bytes=r.size_bytes, type=r.type) for r in rows)
    return MemoryReport(kernel_rss_bytes=None, variables_total_bytes=0, variables=sized)


def memory_usage(ctx: ToolContext, args: NoArgs) -> MemoryReport:
    """The kernel's resident memory and the largest user variables (recorded figures where there are)."""
    answer = _memory_from_listing(ctx) or _ask(ctx.kernel.introspect.memory, top=10_000, known=ctx.recorded_sizes)
    sized = [r.model_copy(update={"size_bytes": ctx.size_of(r.name, r.size_bytes)}) for r in answer.variables]
    sized.sort(key=lambda r: (-r.size_bytes, r.name))
    rss = ctx.recorded_memory if ctx.recorded_memory is not None else answer.kernel_rss_bytes
    total = sum(r.size_bytes for r in sized)
    shown = tuple(sized[: min(ctx.max_rows, 15)])
    return MemoryReport(kernel_rss_bytes=rss, variables_total_bytes=total, variables=shown)


def get_source(ctx: ToolContext, args: SourceArgs) -> SourceAnswer:
    """The source of a function or class: from the kernel, else its latest definition in the history.

    IPython cannot give the source of classes defined in cells, and a kernel restored from a snapshot has
    lost the cells' source lines, so the history is often the only place left. For an instance whose
    class is the user's, the class's definition is looked up.
    """
    name = args.name
    try:
        source = _ask(ctx.kernel.introspect.source, name, max_chars=ctx.max_chars).source
    except ToolError as exc:
        found, instance_of = find_definition(name, ctx.history), None
        if found is None and (cls := _class_name(ctx, name)) not in (None, name):
            found, instance_of = find_definition(cls, ctx.history), cls
        if found is None:
            raise ToolError(f"{exc} No `def {name}` or `class {name}` ran in the history either.") from exc
        return SourceAnswer(
            name=name,
            source=found.source,
            origin="history",
            instance_of=instance_of,
            kernel_error=str(exc),
            execution=found.index,
        )
    header = _DEFINITION_LINE.search(source)
    if header is None or header["name"] == name:
        return SourceAnswer(name=name, source=source, origin="kernel")
    kind = "class" if header["kind"] == "class" else "function"
    return SourceAnswer(name=name, source=source, origin="kernel", defines=f"{kind} {header['name']}")


_DEFINITION_LINE = re.compile(r"^\s*(?P<kind>class|def|async\s+def)\s+(?P<name>\w+)", re.MULTILINE)


def _class_name(ctx: ToolContext, name: str) -> str | None:
    """The unqualified class name of a variable, or None when the kernel does not define it."""
    try:
        info = _ask(ctx.kernel.introspect.inspect_variable, name, max_chars=50)
    except ToolError:
        return None
    return info.type.rsplit(".", 1)[-1]


def recent_executions(ctx: ToolContext, args: RecentExecutionsArgs) -> RecentExecutions:
    """The last ``n`` executions with their code and output, oldest first, each bounded."""
    history = list(ctx.history)
    items = history[-args.n :] if history else []
    header = f"The last {len(items)} of {len(history)} executions, oldest first:"
    budget = max((ctx.max_chars - len(header)) // max(len(items), 1) - 60, 80)
    shown = []
    for item in items:
        output = item.output.strip("\n")
        source, cut = _share(item.source.strip("\n"), output or "(no output)", budget)
        shown.append(ShownExecution(index=item.index, source=source, output=cut if output else ""))
    return RecentExecutions(total=len(history), executions=tuple(shown))


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
        reads_history=True,
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
