"""``themisto kernel-env``: make, list and remove kernel environments.

The work is `themisto_env.sandbox.environments.manage`'s; this module is the command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from themisto_env.commands.common import console

kernel_env_app = typer.Typer(
    help="Kernel environments: named package sets (a venv, an image) that datasets are replayed in.",
    no_args_is_help=True,
)
"""``themisto kernel-env``."""


@kernel_env_app.command("create")
def kernel_env_create(
    name: Annotated[str, typer.Argument(help="Name of the kernel environment (moves to the new one if it exists).")],
    requirements: Annotated[
        Path | None, typer.Option("--requirements", "-r", help="A requirements file (pip syntax, packages only).")
    ] = None,
    apt: Annotated[list[str] | None, typer.Option("--apt", help="A Debian package to install (repeatable).")] = None,
    python: Annotated[str | None, typer.Option("--python", help="Python version X.Y (default: this one).")] = None,
    docker: Annotated[bool, typer.Option("--docker", help="Also build its image for the docker backend.")] = False,
) -> None:
    """Make a named kernel environment: a venv (local, bwrap) and with --docker an image, holding the
    requirements plus ipykernel and dill at versions compatible with them. Instant when it exists."""
    import time

    from themisto_env.sandbox.environments import manage
    from themisto_env.sandbox.environments.environment_spec import make_spec

    started = time.perf_counter()
    spec = make_spec(requirements, apt=apt, python=python)
    record, cached = manage.create(name, spec, docker=docker, console=Console(stderr=True))
    how = "exists" if cached else f"built in {time.perf_counter() - started:.0f} s"
    console.print(
        f"kernel environment [bold]{escape(name)}[/]: {record.id} ({how}); Python {record.python_version}, "
        f"{len(record.packages)} packages, {record.size_bytes / 1e6:.0f} MB"
        + (f"; image {escape(record.image)}" if record.image else "")
    )


@kernel_env_app.command("list")
def kernel_env_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The kernel environments on this machine (--json also names their docker images)."""
    from themisto_env.sandbox.environments.environment_registry import list_kernel_environments, names_of

    if as_json:
        rows = [
            {
                "names": names_of(r.id),
                **r.model_dump(exclude={"packages"}),
                "packages": len(r.packages),
            }
            for r in list_kernel_environments()
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table()
    table.add_column("name", overflow="fold", min_width=10)
    for column in ("id", "python", "packages", "size", "created"):
        table.add_column(column, no_wrap=True)
    for record in list_kernel_environments():
        table.add_row(
            escape("\n".join(names_of(record.id)) or "-"),
            record.id,
            record.python_version,
            str(len(record.packages)),
            f"{record.size_bytes / 1e6:.0f} MB",
            record.created[:10],
        )
    console.print(table)


@kernel_env_app.command("rm")
def kernel_env_rm(
    name: Annotated[str, typer.Argument(help="Name (or id) of the kernel environment.")],
    force: Annotated[bool, typer.Option("--force", help="Remove it even if a dataset built here uses it.")] = False,
) -> None:
    """Remove a kernel environment's name; the kernel environment (venv and image) goes once no name points
    at it."""
    from themisto_env.sandbox.environments import manage
    from themisto_env.sandbox.environments.environment_registry import names_of

    record = manage.remove(name, force=force)
    left = names_of(record.id)
    console.print(
        f"removed {escape(name)}" + (f"; {record.id} kept for {escape(', '.join(left))}" if left else f" ({record.id})")
    )


__all__ = ["kernel_env_app"]
