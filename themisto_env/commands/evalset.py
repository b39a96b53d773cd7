"""``themisto eval-set``: a grid of agents × tasks × observation modes, one run folder each, and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from themisto_env.commands.common import console, estimate_text
from themisto_env.metrics import METRICS


def eval_set_command(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Eval-set config (YAML or JSON): the grid and run options.")
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            help="Agents (repeatable, or comma-separated): names of `themisto agents` or package.module:Class."
        ),
    ] = None,
    task: Annotated[str | None, typer.Option(help="Tasks, comma-separated: next-cell,output (default: both).")] = None,
    observation: Annotated[
        str | None, typer.Option(help="Observation modes, comma-separated: static,full,tools (default: all three).")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", metavar="PROVIDER/NAME", help="The LLM agents' model, as for run.")
    ] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", metavar="URL", help="The provider's endpoint.")] = None,
    model_args: Annotated[
        list[str] | None, typer.Option("--model-arg", "-M", metavar="KEY=VALUE", help="A model argument (repeatable).")
    ] = None,
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="local, bwrap or docker.")] = None,
    data: Annotated[
        Path | None,
        typer.Option("--data", "--dataset", help="Dataset folder (default: the bundled data); as run's --data."),
    ] = None,
    split: Annotated[str | None, typer.Option("--split", metavar="train|test|NAME:SIDE", help="As for run.")] = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="At most this many samples per setting (run's seeded selection).")
    ] = None,
    max_runs: Annotated[
        int | None,
        typer.Option("--max-runs", min=1, metavar="N", help="Settings run at once (default: the cores, at most 4)."),
    ] = None,
    max_connections: Annotated[
        int | None, typer.Option("--max-connections", min=1, metavar="N", help="Model calls in flight per setting.")
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option("--cache", metavar="FILE", help="SQLite cache of model replies, shared by the settings."),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Eval-set folder: a run folder per setting (resumed), eval-set.json.")
    ] = Path("runs/eval-set"),
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write OUT/report.html.")] = True,
) -> None:
    """Run a grid of agents × tasks × observation modes (resumable); print the table, write eval-set.json."""
    from themisto_env.run.config import parse_model_args
    from themisto_env.run.evalset import grid_rows, load_eval_set_config, run_grid, write_grid
    from themisto_env.run.evalset_report import grid_markdown, write_grid_report

    overrides: dict[str, Any] = {
        "agent": agent,
        "task": task,
        "observation": observation,
        "max_runs": max_runs,
        "model": model,
        "base_url": base_url,
        "model_args": parse_model_args(model_args or []) or None,
        "backend": backend,
        "data": str(data) if data is not None else None,
        "split": split,
        "limit": limit,
        "max_connections": max_connections,
        "cache": str(cache) if cache is not None else None,
    }
    grid = load_eval_set_config(config, {k: v for k, v in overrides.items() if v is not None})
    settings = grid.settings()
    console.print(f"eval-set: {len(settings)} settings into {out}", markup=False)

    def done(outcome: Any) -> None:
        s = outcome.setting
        why = f": {outcome.error}" if outcome.error else ""
        console.print(f"  {outcome.status:<7} {s.agent} on {s.task} ({s.observation}){why}", markup=False)

    outcomes = run_grid(grid, out, on_done=done)
    rows = grid_rows(outcomes, out)
    path = write_grid(rows, out, grid)
    (out / "eval-set.md").write_text(grid_markdown(rows, out), encoding="utf-8")
    wide_console().print(grid_table(rows))
    console.print(f"table: {path}", markup=False)
    if report:
        console.print(f"report: {write_grid_report(rows, out)}", markup=False)
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        console.print(f"[bold red]error:[/] {len(failed)} of {len(outcomes)} settings failed (run again to retry them)")
        raise typer.Exit(1)


TABLE_WIDTH = 200
"""Columns of the grid's table when stdout is not a terminal (rich would assume 80 and cut its cells)."""


def wide_console() -> Console:
    """The commands' console on a terminal; a `TABLE_WIDTH`-wide one otherwise (piped, captured)."""
    return console if console.is_terminal else Console(width=TABLE_WIDTH)


def grid_table(rows: list[dict[str, Any]]) -> Table:
    """The eval-set's table (the paper's): a row per setting, each metric, the reward, tool calls and tokens
    per sample with their 95% intervals."""
    table = Table(title="eval-set (95% intervals resample whole trajectories)")
    for column in ("agent", "task", "observation", "samples", *METRICS, "reward", "tool calls", "tokens"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            escape(r["agent"]),
            r["task"],
            r["observation"],
            str(r["samples"]) if r["status"] != "failed" else "[red]failed[/]",
            *(estimate_text(r.get(m)) for m in METRICS),
            estimate_text(r.get("reward")),
            estimate_text(r.get("tool_calls"), 2),
            estimate_text(r.get("tokens"), 0),
        )
    return table


__all__ = ["TABLE_WIDTH", "eval_set_command", "grid_table", "wide_console"]
