"""``themisto sandbox``: build the kernel image, check a backend, remove what dead processes left."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from themisto_env.commands.common import Backend, console

sandbox_app = typer.Typer(
    help="Kernel backends: build the image, check a backend, remove what dead processes left.", no_args_is_help=True
)
"""``themisto sandbox``."""


@sandbox_app.command("build-image")
def sandbox_build_image(
    force: Annotated[
        bool, typer.Option(help="Rebuild even if the image exists (with --server: the server image).")
    ] = False,
    server: Annotated[
        bool,
        typer.Option(
            "--server",
            help="Build the server image: `themisto serve` in a container, built from the kernel image (made first "
            "if missing) with the bundled data inside (needs a checkout installed with the serve extra).",
        ),
    ] = False,
) -> None:
    """Build the kernel container image offline (debootstrap + wheels of the host's versions).

    Each image is built only when missing: its tag is a hash of what goes into it. With --server, the
    server image follows (about a minute once the kernel image and the bundled data exist; the bundled data
    is replayed on this host first if it is not yet). Run it with `docker run --rm --init -p
    127.0.0.1:8000:8000 -e THEMISTO_SERVE_TOKEN=... IMAGE`.
    """
    if server:
        from themisto_env.bridges.openenv.image import TOKEN_VARIABLE, build_server_image

        name = build_server_image(force=force)
        console.print(f"server image: [bold]{escape(name)}[/]")
        console.print(
            f"run it: docker run --rm --init -p 127.0.0.1:8000:8000 -e {TOKEN_VARIABLE}=... {name}",
            markup=False,
            soft_wrap=True,
        )
        return
    from themisto_env.sandbox.image.build import build_image

    name = build_image(force=force)
    console.print(f"kernel image: [bold]{escape(name)}[/]")


@sandbox_app.command("check")
def sandbox_check(
    backend: Backend = "local",
    forked: Annotated[
        bool, typer.Option("--forked", help="Check kernels forked from a kernel template of the backend.")
    ] = False,
) -> None:
    """Run the conformance suite on a kind of kernel and print a table; exit 1 if a check fails.

    The kind is a backend's kernels as started (default) or forked from a template (--forked). A backend that
    cannot start here is one line (why, and what to do). bwrap refuses root: as root, from a checkout,
    `bash scripts/setup-bwrap-user.sh --setup-only` makes an unprivileged user with a venv,
    then `runuser -u themisto-bwrap -- /opt/themisto-bwrap/venv/bin/themisto sandbox check --backend bwrap`.
    """
    from themisto_env.errors import BackendUnavailableError
    from themisto_env.sandbox.kernel.conformance import checks_for, run_check
    from themisto_env.sandbox.kernel.launcher import launcher_class
    from themisto_env.sandbox.kinds import kind_name, open_kind

    cleaned = launcher_class(backend).cleanup_stale()
    if cleaned:
        console.print(f"removed {len(cleaned)} stale kernel(s) left by crashed processes: {escape(', '.join(cleaned))}")
    name = kind_name(backend, "forked" if forked else "started")
    table = Table(title=f"sandbox check: {name}")
    for column in ("check", "result", "seconds", "detail"):
        table.add_column(column)
    failed = 0
    with console.status(f"checking {name} kernels...") as status, open_kind(name) as kind:
        for check in checks_for(kind):
            status.update(escape(f"{check.name}: {check.description}"))
            result = run_check(check, kind)
            unavailable = "BackendUnavailableError: "
            if check.name == "start" and not result.passed and result.detail.startswith(unavailable):
                raise BackendUnavailableError(f"sandbox check: {result.detail.removeprefix(unavailable)}")
            failed += not result.passed
            mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
            table.add_row(escape(check.name), mark, f"{result.seconds:.1f}", escape(result.detail))
    console.print(table)
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("gc")
def sandbox_gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be removed.")] = False,
    roots: Annotated[
        list[Path] | None,
        typer.Option("--root", help="Where run directories are (default: the temporary directory and /tmp)."),
    ] = None,
) -> None:
    """Remove what dead processes left: kernel run directories, kernel processes, containers.

    Kernels, run directories and containers of live processes are never touched.
    """
    from themisto_env.errors import BackendUnavailableError
    from themisto_env.sandbox.backends.containers import remove_stale_containers
    from themisto_env.sandbox.lifetime.leftovers import collect

    lines = collect(roots or None, dry_run=dry_run, containers=False)  # containers: all labelled ones, below
    docker_note = None
    try:
        verb = "would remove" if dry_run else "removed"
        lines += [f"{verb} container {name} (owner dead)" for name in remove_stale_containers(dry_run=dry_run)]
    except BackendUnavailableError as exc:
        docker_note = f"docker: not checked ({exc})"
    for line in lines:
        typer.echo(line)
    if docker_note:
        typer.echo(docker_note)
    items = sum(not line.startswith("warning:") for line in lines)
    typer.echo(f"{items} item(s) {'to remove' if dry_run else 'removed'}" + ("" if items else ": nothing left behind"))


__all__ = ["sandbox_app"]
