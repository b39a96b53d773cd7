"""``themisto data``: build trajectory datasets and describe them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from themisto_env.commands.common import Backend, console
from themisto_env.errors import ConfigError

data_app = typer.Typer(help="Build and inspect trajectory datasets.", no_args_is_help=True)
"""``themisto data``."""


@data_app.command("build")
def data_build(
    sources: Annotated[
        list[Path], typer.Argument(help="JuNE logs (.csv, .parquet, .jsonl), .ipynb files, or folders.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write (continued if it exists).")],
    backend: Backend = "local",
    snapshots: Annotated[bool, typer.Option(help="Snapshot the namespace after every step.")] = True,
    timeout: Annotated[float, typer.Option(help="Per-execution timeout in seconds.")] = 60.0,
    env: Annotated[
        str | None, typer.Option("--env", help="Kernel environment to replay in (`themisto env create`).")
    ] = None,
    requirements: Annotated[
        Path | None,
        typer.Option("--requirements", help="Replay in an environment of these requirements (made if missing)."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Folder the kernels run in a private copy of (default: each notebook's own folder; none for "
            "JuNE logs): where the session's files are."
        ),
    ] = None,
    workdir_limit_mb: Annotated[float, typer.Option(help="Largest working folder copied into a kernel (MB).")] = 100.0,
) -> None:
    """Replay sessions into trajectories with runtime state."""
    from themisto_env.replay.build import build_dataset
    from themisto_env.sandbox.models import SandboxLimits

    if env is not None and requirements is not None:
        raise ConfigError("give either --env or --requirements, not both")
    if requirements is not None:
        from themisto_env.replay import environments

        spec = environments.make_spec(requirements)
        env = environments.create(None, spec, console=Console(stderr=True))[0].id

    limits = SandboxLimits(timeout_s=timeout, workdir_mb=workdir_limit_mb)
    report = build_dataset(
        sources, out, backend=backend, snapshots=snapshots, limits=limits, workdir=workdir, environment=env
    )
    console.print(
        f"built {len(report.built)}, skipped {len(report.skipped)} already built, "
        f"failed {len(report.failed)}; {report.steps} steps in {report.seconds:.1f} s -> {out}",
        markup=False,
    )
    for tid, why in report.failed.items():
        console.print(f"[yellow]incomplete[/] {escape(f'{tid}: {why}')}")


@data_app.command("info")
def data_info(
    folder: Annotated[Path | None, typer.Argument(help="Dataset folder (default: the bundled data).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    backend: Backend = "local",
    raw: Annotated[bool, typer.Option("--raw", help="Also compare outputs without normalisation.")] = False,
    limit: Annotated[int, typer.Option(help="Disagreeing steps listed (all with --json).")] = 20,
) -> None:
    """Sessions, executions, samples per task, and replay agreement with its disagreements by kind."""
    from themisto_env.data.stats import dataset_info
    from themisto_env.replay.resolve import resolve_dataset

    info = dataset_info(resolve_dataset(folder, backend=backend), raw=raw)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    table = Table(title=escape(f"dataset {info['folder']}"))
    table.add_column("")
    table.add_column("value", justify="right")
    for key in ("trajectories", "complete", "executions", "errors", "restarts", "snapshot_mb"):
        table.add_row(key, str(info[key]))
    for task, n in info["samples"].items():
        dropped = info["samples_dropped_disagreeing"][task]
        table.add_row(f"samples: {task}", f"{n} ({dropped} dropped: replay disagrees)" if dropped else str(n))
    table.add_row("replay agreement", f"{share(info['agreement'])} of {info['compared']} compared")
    if raw:
        table.add_row("replay agreement, raw", share(info["raw_agreement"]))
    for kind, n in info["agreement_kinds"].items():
        table.add_row(f"  {kind}", str(n))
    console.print(table)
    rows = info["disagreements"]
    if rows:
        console.print("executions whose replayed output differs from the recorded one:")
        for row in rows[:limit]:
            console.print(f"  {row['trajectory']} step {row['step']} [{row['kind']}] {row['detail']}", markup=False)
        if len(rows) > limit:
            console.print(f"  ... {len(rows) - limit} more (--limit, or --json for all)", markup=False)


__all__ = ["data_app"]
