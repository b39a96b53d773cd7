"""The ``themisto`` command line: the console entry point (``themisto_env.cli:main``) and the app it runs.

Each group and command lives in `themisto_env.commands` (``sandbox``, ``kernel-env``, ``data``, ``run``,
``agents``, ``compare``, ``report``, ``view``); this module assembles them into one Typer app.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from themisto_env.commands.common import storage_error_line
from themisto_env.commands.data import data_app
from themisto_env.commands.kernel_environments import kernel_env_app
from themisto_env.commands.results import compare_command, report_command, view_command
from themisto_env.commands.run import agents_command, run_command
from themisto_env.commands.sandbox import sandbox_app
from themisto_env.commands.serve import serve_command
from themisto_env.errors import ThemistoError

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
app.command("agents")(agents_command)
app.command("compare")(compare_command)
app.command("report")(report_command)
app.command("view")(view_command)
app.command("serve")(serve_command)


HELP_WIDTH = 120
"""Columns of ``--help`` when stdout is not a terminal (rich would assume 80 and cut the options' help)."""


def main() -> None:
    """Entry point: ThemistoErrors become a one-line message and exit code 1, never a traceback."""
    widen_help()
    try:
        app()
    except ThemistoError as exc:  # one line, not wrapped, the message's brackets not read as markup
        _fail(str(exc))
    except OSError as exc:  # a full disk, a read-only folder: one line naming the file and how to go on
        line = storage_error_line(exc)
        if line is None:
            raise
        _fail(line)


def widen_help() -> None:
    """``--help`` piped or captured (no terminal, no ``TERMINAL_WIDTH``) is `HELP_WIDTH` wide; on a
    terminal it takes the terminal's width."""
    import typer.rich_utils

    if typer.rich_utils.MAX_WIDTH is None and not sys.stdout.isatty():
        typer.rich_utils.MAX_WIDTH = HELP_WIDTH


def _fail(message: str) -> None:
    message = " ".join(message.split())
    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    raise SystemExit(1) from None


__all__ = ["HELP_WIDTH", "app", "main", "widen_help"]


if __name__ == "__main__":  # pragma: no cover
    main()
