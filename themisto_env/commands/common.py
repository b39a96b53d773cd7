"""What the ``themisto`` commands share: the console they print to and common options."""

from __future__ import annotations

import errno
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from themisto_env.errors import ConfigError

console = Console()
"""Where the commands print (stdout)."""

KERNEL_PANEL = "Kernel"
"""The help panel of the kernel's options (``--backend``, ``--kernel``, ``--ray``, ...)."""

Backend = Annotated[str, typer.Option("--backend", "-b", help="Kernel backend: local, bwrap or docker.")]
"""The ``--backend`` option."""

KernelOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--kernel",
        "-K",
        metavar="KEY=VALUE",
        rich_help_panel=KERNEL_PANEL,
        help="A kernel option (repeatable; a config file's kernel: block): -K fork=false -K warm_kernels=0 "
        "-K limits.timeout_s=120 -K environment=NAME -K snapshot_dir=DIR.",
    ),
]
"""The ``--kernel``/``-K`` option (``serve``, ``run``): the env's kernel options, `kernel_options`."""

ToolBudget = Annotated[
    int | None, typer.Option("--tool-budget", min=0, help="Tool calls per sample (env: tool_budget).")
]
"""The ``--tool-budget`` option (``serve``, ``run``, ``mcp``): the env's ``tool_budget``."""

ToolCost = Annotated[
    float | None, typer.Option("--tool-cost", min=0.0, help="Reward paid per tool call (env: tool_cost).")
]
"""The ``--tool-cost`` option (``serve``, ``mcp``: no config file; ``run`` takes it in its ``env:`` block)."""


def episode_options(
    task: str,
    observation: str,
    backend: str,
    *,
    data: object = None,
    split: str | None = None,
    tool_budget: int | None = None,
    tool_cost: float | None = None,
    kernel: list[str] | None = None,
    execution_score: bool = False,
) -> dict[str, Any]:
    """The env options a serving command's flags give (``serve``, ``mcp``): those left unset are left out, so
    the env's defaults hold."""
    options: dict[str, Any] = {"task": task, "observation": observation, "backend": backend}
    given = {"dataset": None if data is None else str(data), "split": split, "tool_budget": tool_budget}
    options.update({key: value for key, value in {**given, "tool_cost": tool_cost}.items() if value is not None})
    if kernel:
        options["kernel"] = kernel_options(kernel)
    if execution_score:
        options["execution_score"] = True
    return options


def kernel_options(pairs: list[str] | None) -> dict[str, Any]:
    """``-K`` pairs as the env's kernel options: ``["fork=false", "limits.timeout_s=120"]`` -> ``{"fork": False,
    "limits": {"timeout_s": 120}}`` (values read as YAML scalars, a dotted key as a nested option).

    Raises:
        ConfigError: A pair is not KEY=VALUE, or names the backend (``--backend`` does).
    """
    from themisto_env.run.config import parse_model_args

    options: dict[str, Any] = {}
    for key, value in parse_model_args(list(pairs or []), flag="-K").items():
        if key == "backend":
            raise ConfigError("give the backend with --backend, not -K backend=...")
        *parents, leaf = key.split(".")
        nested = options
        for parent in parents:
            nested = nested.setdefault(parent, {})
        nested[leaf] = value
    return options


def estimate_text(m: dict | None, digits: int = 3) -> str:
    """``mean [low, high]`` of an estimate, escaped for rich (empty when absent): a cell of ``compare``'s
    and ``eval-set``'s tables."""
    if not m:
        return ""
    return escape(f"{m['mean']:.{digits}f} [{m['ci_low']:.{digits}f}, {m['ci_high']:.{digits}f}]")


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
    "KERNEL_PANEL",
    "RESUME_HINT",
    "Backend",
    "KernelOptions",
    "ToolBudget",
    "ToolCost",
    "console",
    "episode_options",
    "estimate_text",
    "kernel_options",
    "storage_error_line",
]
