"""The text a model reads of each typed tool answer: `render`, one function per answer model.

A tool answers with a model (`ToolResult.data`); its text (`ToolResult.text`) is rendered from it here and
nowhere else, so that what a model reads and what a program reads are the same facts.
"""

from __future__ import annotations

from functools import singledispatch

from pydantic import BaseModel

from themisto_env.env.tools._answers import RecentExecutions, SourceAnswer, TriedCell, VariableChange
from themisto_env.env.tools._text import clip, human_size, shape_or_length, table
from themisto_env.sandbox.kernel.answers import FrameView, MemoryReport, VariableDetail, VariableListing

#: The first line of a try_cell answer.
TRIED_HEADER = (
    "Ran your cell in a disposable copy of the kernel (the state before the next cell; the notebook's "
    "kernel is unchanged)."
)


@singledispatch
def render(answer: BaseModel) -> str:
    """The text of a tool's typed answer, as the model reads it (before the context's bound)."""
    raise TypeError(f"no rendering of a {type(answer).__name__}")


@render.register
def _listing(answer: VariableListing) -> str:
    rows = answer.variables
    if not rows:
        return "No user variables are defined (imported modules are not listed)."
    shown = f", the first {len(rows)} by name" if len(rows) < answer.total else ""
    lines = [(r.name, r.type, human_size(r.size_bytes), shape_or_length(r.shape, r.length)) for r in rows]
    header = f"{answer.total} user variables{shown} (modules not listed):\n"
    return header + table(("name", "type", "size", "shape/len"), lines)


@render.register
def _detail(info: VariableDetail) -> str:
    facts = [f"size {human_size(info.size_bytes)}"]
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
        wide = len(shape) == 2 and shape[1] > len(dtypes)
        label = f"column dtypes (first {len(dtypes)} of {shape[1]})" if wide else "column dtypes"
        lines.append(clip(f"{label}: {columns}", 400))
    lines += ["value (shortened, ... marks the cuts):" if info.shortened else "value:", info.repr]
    return "\n".join(lines)


@render.register
def _frame(view: FrameView) -> str:
    call = f"head({view.n})" if view.view == "head" else f"{view.view}()"
    return f"{view.name}.{call}:\n{view.text}"


@render.register
def _memory(report: MemoryReport) -> str:
    total = report.variables_total_bytes
    lines = [
        f"kernel process memory (resident): {human_size(report.kernel_rss_bytes)}",
        f"user variables: {human_size(total)} in total (modules not counted)",
    ]
    if report.variables:
        lines.append("largest variables:")
        share = [
            (r.name, r.type, human_size(r.size_bytes), f"{100 * r.size_bytes / total:.0f}%" if total else "")
            for r in report.variables
        ]
        lines.append(table(("name", "type", "size", "share"), share))
    return "\n".join(lines)


@render.register
def _source(answer: SourceAnswer) -> str:
    name = answer.name
    if answer.origin == "history":
        what = f"of {name!r}" + (f" (an instance of {answer.instance_of})" if answer.instance_of else "")
        return (
            f"# The kernel cannot show the source {what} ({answer.kernel_error}).\n"
            f"# From the history: the most recent definition, in execution [{answer.execution}]:\n{answer.source}"
        )
    defines = f" (the {answer.defines})" if answer.defines else ""
    return f"# source of {name}{defines}, from the kernel:\n{answer.source}"


@render.register
def _executions(answer: RecentExecutions) -> str:
    if not answer.total:
        return "No cells have been executed yet."
    blocks = [f"The last {len(answer.executions)} of {answer.total} executions, oldest first:"]
    for item in answer.executions:
        output = item.output or "(no output)"
        blocks.append(f"--- execution [{item.index}] ---\nIn:\n{item.source}\nOut:\n{output}")
    return "\n".join(blocks)


@render.register
def _tried(answer: TriedCell) -> str:
    head = [TRIED_HEADER, f"status: {answer.status}", "outputs:", answer.outputs or "(no output)"]
    return "\n".join([*head, changes_text(answer.changes, answer.changed, answer.options_changed)])


def changes_text(changes: tuple[VariableChange, ...] | None, changed: int, options: bool) -> str:
    """The variables a tried cell created, changed or deleted, as a table (display options on a line)."""
    if changes is None:
        return "changed variables: not measured (the run failed)"
    if not changes:
        lines = ["changed variables: none"]
    else:
        more = f" (the first {len(changes)} of {changed} by name)" if changed > len(changes) else ""
        rows = [(c.name, c.type, c.shape, c.change) for c in changes]
        lines = [f"changed variables{more}:", table(("name", "type", "shape/len", "change"), rows)]
    if options:
        lines.append("display options (pandas/numpy): changed")
    return "\n".join(lines)
