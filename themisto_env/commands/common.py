"""What the ``themisto`` commands share: the console they print to and common options."""

from __future__ import annotations

import errno
from typing import Annotated

import typer
from rich.console import Console

console = Console()
"""Where the commands print (stdout)."""

Backend = Annotated[str, typer.Option("--backend", "-b", help="Kernel backend: local, bwrap or docker.")]
"""The ``--backend`` option."""

ToolBudget = Annotated[
    int | None, typer.Option("--tool-budget", min=0, help="Tool calls per sample (env: tool_budget).")
]
"""The ``--tool-budget`` option (``serve``, ``run``): the env's ``tool_budget``."""

ToolCost = Annotated[
    float | None, typer.Option("--tool-cost", min=0.0, help="Reward paid per tool call (env: tool_cost).")
]
"""The ``--tool-cost`` option (``serve``, ``run``): the env's ``tool_cost``."""

HistoryLength = Annotated[
    int | None,
    typer.Option("--history-length", min=0, help="Executions shown in the observation (env: history_length)."),
]
"""The ``--history-length`` option (``serve``, ``run``): the env's ``history_length``."""


def env_options(tool_budget: int | None, tool_cost: float | None, history_length: int | None) -> dict[str, object]:
    """The env options given on the command line (`ToolBudget`, `ToolCost`, `HistoryLength`), None left out."""
    given = {"tool_budget": tool_budget, "tool_cost": tool_cost, "history_length": history_length}
    return {key: value for key, value in given.items() if value is not None}


_STORAGE_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file grew past the size allowed",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}

RESUME_HINT = (
    "free some space or give a folder you can write to, then run the same command again: a run resumes "
    "from the rows already written, a build keeps the trajectories already built"
)


def storage_error_line(exc: OSError) -> str | None:
    """The one line a command ends with when a file could not be written or read for lack of space or
    permission: what happened, the file, and how to go on; None for any other ``OSError`` (a bug to see).

    Args:
        exc: The error (its ``filename`` names the file where the writer knew it:
            `themisto_env.data.writes`).
    """
    what = _STORAGE_ERRORS.get(exc.errno or -1)
    if what is None:
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{what}{where}: {RESUME_HINT}."


__all__ = [
    "RESUME_HINT",
    "Backend",
    "HistoryLength",
    "ToolBudget",
    "ToolCost",
    "console",
    "env_options",
    "storage_error_line",
]
