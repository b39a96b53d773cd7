"""The ``themisto`` command line: the console entry point (``themisto_env.cli:main``) and the app it runs.

Each group and command lives in `themisto_env.commands` (``sandbox``, ``kernel-env``, ``data``, ``run``,
``agents``, ``eval-set``, ``compare``, ``report``, ``view``, ``serve``, ``mcp``); this module assembles them
into one Typer app.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from themisto_env.commands.common import storage_error_line
from themisto_env.commands.data import data_app
from themisto_env.commands.evalset import eval_set_command
from themisto_env.commands.kernel_environments import kernel_env_app
from themisto_env.commands.mcp import mcp_command
from themisto_env.commands.results import compare_command, report_command, view_command
from themisto_env.commands.run import agents_command, run_command
from themisto_env.commands.sandbox import sandbox_app
from themisto_env.commands.serve import serve_command
from themisto_env.errors import ThemistoError, did_you_mean

app = typer.Typer(
    help="themisto-env: predict Jupyter development trajectories from runtime state.", no_args_is_help=True
)


def _version(show: bool) -> None:
    if show:
        from themisto_env._version import __version__

        typer.echo(f"themisto-env {__version__}")
        raise typer.Exit()


@app.callback()
def _top(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """themisto-env: predict Jupyter development trajectories from runtime state."""


app.add_typer(data_app, name="data")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(kernel_env_app, name="kernel-env")
app.command("run")(run_command)
app.command("eval-set")(eval_set_command)
app.command("agents")(agents_command)
app.command("compare")(compare_command)
app.command("report")(report_command)
app.command("view")(view_command)
app.command("serve")(serve_command)
app.command("mcp")(mcp_command)


HELP_WIDTH = 120
"""Columns of ``--help`` when stdout is not a terminal (rich would assume 80 and cut the options' help)."""


def main() -> None:
    """Entry point: ThemistoErrors become a one-line message and exit code 1, never a traceback; a misused
    command line (an unknown option or command, a bad value) one line and exit code 2 (`usage_line`)."""
    widen_help()
    try:
        code = app(standalone_mode=False, prog_name="themisto")  # click's errors come here, not to its boxed rendering
    except typer.TyperException as exc:  # click's (vendored by typer): usage errors, bad parameters
        if type(exc).__name__ == "NoArgsIsHelpError":  # `themisto data`: the group's help
            exc.show()  # type: ignore[attr-defined]
            raise SystemExit(2) from None
        _fail(usage_line(exc), code=getattr(exc, "exit_code", 1))
    except typer.Abort:
        _fail("aborted")
    except ThemistoError as exc:  # one line, not wrapped, the message's brackets not read as markup
        _fail(str(exc))
    except OSError as exc:  # a full disk, a read-only folder: one line naming the file and how to go on
        line = storage_error_line(exc)
        if line is None:
            raise
        _fail(line)
    else:
        raise SystemExit(code if isinstance(code, int) else 0)


def usage_line(exc: Exception) -> str:
    """A command-line mistake (click's ``UsageError``, as typer vendors it) as one line naming the command,
    what was wrong and the nearest valid option or command (`did_you_mean`, as a config's typo gets):
    ``themisto run: no such option --tol-budget; did you mean '--tool-budget'?``."""
    ctx: Any = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "themisto"
    option = getattr(exc, "option_name", None)
    if ctx is not None and option and type(exc).__name__ == "NoSuchOption":
        params = [p for p in ctx.command.params if not getattr(p, "hidden", False)]
        names = [name for p in params for name in (*p.opts, *p.secondary_opts)]
        return f"{where}: no such option {option}{did_you_mean(option, names)}"
    wrong = re.match(r"No such command '(.+?)'", str(getattr(exc, "message", "")))
    if ctx is not None and wrong and hasattr(ctx.command, "list_commands"):
        name = wrong.group(1)
        return f"{where}: no such command {name!r}{did_you_mean(name, ctx.command.list_commands(ctx))}"
    shown = exc.format_message() if hasattr(exc, "format_message") else str(exc)  # names the option or argument
    return f"{where}: {shown.rstrip('.')} (see {where} --help)"


def widen_help() -> None:
    """``--help`` piped or captured (no terminal, no ``TERMINAL_WIDTH``) is `HELP_WIDTH` wide; on a
    terminal it takes the terminal's width."""
    import typer.rich_utils

    if typer.rich_utils.MAX_WIDTH is None and not sys.stdout.isatty():
        typer.rich_utils.MAX_WIDTH = HELP_WIDTH


def _fail(message: str, code: int = 1) -> None:
    message = " ".join(message.split())
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    raise SystemExit(code) from None


__all__ = ["HELP_WIDTH", "app", "main", "usage_line", "widen_help"]


if __name__ == "__main__":  # pragma: no cover
    main()
