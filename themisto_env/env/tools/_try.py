"""The ``try_cell`` tool: run a candidate next cell in a disposable kernel and read what it did.

Revision with execution feedback (as CodeBenchGen does it): the agent writes a candidate, sees its outputs,
whether it raised, and which variables it created, changed or deleted, and may revise before it predicts.
The candidate runs through `ToolContext.try_code` in a throw-away kernel brought to the current
state (`themisto_env.state.copies`); the env's own kernel is never touched. The answer holds only what
the candidate itself produced: nothing recorded (neither the target nor a later step) is compared with it
or shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.env.tools._answers import TriedCell, VariableChange
from themisto_env.env.tools._models import ToolContext, ToolError
from themisto_env.env.tools._render import TRIED_HEADER, changes_text
from themisto_env.env.tools._text import clip
from themisto_env.sandbox.kernel.helper import OPTIONS_KEY
from themisto_env.sandbox.rendering import render_outputs
from themisto_env.state.copies import DELETED

#: The one-line refusal where candidates may not run (the output task: the cell's run is the answer).
NOT_AVAILABLE = (
    "try_cell is only available in the next-cell task: here the cell is given and running it would "
    "reveal the output you are asked to predict."
)

#: What the agent reads for each way a candidate can fail; the run's own ``detail`` replaces it where it
#: is plain (``it ran past 30 s``), never where it may name the machinery's internals.
_FAILURES = {
    "exit": "the kernel died while it ran (it exited or crashed)",
    "memory": "it ran out of memory",
    "processes": "it hit the process limit",
    "timeout": "it ran past the time limit",
    "unreadable": "its effects on the variables could not be read afterwards",
    "tampered": "it interfered with the measurement of its effects",
}
_PLAIN_DETAIL = ("memory", "processes", "timeout")


class TryCellArgs(BaseModel):
    """Arguments of try_cell."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        min_length=1,
        max_length=20_000,
        description="The Python source of the candidate cell, run as a notebook cell (its last expression's "
        "value is shown).",
    )


def try_cell(ctx: ToolContext, args: TryCellArgs) -> TriedCell:
    """Run the candidate in a disposable kernel at the current state: status, outputs, changed variables."""
    if ctx.try_code is None:
        raise ToolError(NOT_AVAILABLE)
    if not args.code.strip():
        raise ToolError("the candidate cell is empty: give the code to run.")
    run = ctx.try_code(args.code)
    status = _status(run.status, run.outputs, run.failure, run.detail)
    changes, changed = _changes(run.changed, ctx.recorded_fingerprint, ctx.max_rows)
    options = run.changed is not None and OPTIONS_KEY in run.changed
    told = len(TRIED_HEADER) + len(f"status: {status}") + 2 + len(changes_text(changes, changed, options))
    outputs = render_outputs(run.outputs).strip("\n")
    shown = clip(outputs, max(ctx.max_chars - told - 40, 100), keep="middle") if outputs else ""
    return TriedCell(status=status, outputs=shown, changes=changes, changed=changed, options_changed=options)


def _status(status: str, outputs: list[dict[str, Any]], failure: str | None, detail: str) -> str:
    if status == "ok":
        return "ok"
    if status == "error":
        error = next((o for o in reversed(outputs) if o.get("output_type") == "error"), None)
        if error is None:
            return "raised an exception"
        name, value = str(error.get("ename", "Exception")), str(error.get("evalue", ""))
        return f"raised {name}: {clip(value, 300)}" if value else f"raised {name}"
    reason = _FAILURES.get(failure or "", "it could not run")
    if failure in _PLAIN_DETAIL and detail:
        reason = clip(detail, 200)
    return f"failed ({failure}): {reason}" if failure else f"failed: {reason}"


def _parts(entry: str) -> tuple[str, str]:
    """A fingerprint entry ``type|shape-or-len|hash`` as a type and a shape or length to show."""
    kind, size, _ = [*entry.rsplit("|", 2), "", ""][:3]
    if size.startswith("len"):
        return kind, f"len {size[3:]}"
    if size:
        dims = size.split("x")
        return kind, "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return kind, ""


def _changes(
    changed: Mapping[str, str] | None, before: Mapping[str, str] | None, max_rows: int
) -> tuple[tuple[VariableChange, ...] | None, int]:
    """The variables the candidate created, changed or deleted (the first ``max_rows`` by name), and how many."""
    if changed is None:
        return None, 0
    names = sorted(name for name in changed if name != OPTIONS_KEY)
    rows = []
    for name in names[:max_rows]:
        entry, old = changed[name], (before or {}).get(name)
        if entry == DELETED:
            kind, size = _parts(old) if old else ("", "")
            rows.append(VariableChange(name=name, type=kind, shape=size, change="deleted"))
            continue
        kind, size = _parts(entry)
        if before is None:
            what = "set"
        elif old is None:
            what = "created"
        elif _parts(old) != (kind, size):
            what = "changed (was " + " ".join(p for p in _parts(old) if p) + ")"
        else:
            what = "changed"
        rows.append(VariableChange(name=name, type=kind, shape=size, change=what))
    return tuple(rows), len(names)
