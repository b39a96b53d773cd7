"""``themisto compare``, ``report`` and ``view``: what runs wrote, compared, plotted and browsed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from themisto_env.commands.common import console, estimate_text


def _default_page(name: str) -> str:
    return f"HTML file (default: RUN_DIR/{name}; several runs: a folder of their own beside the first, runs/a+b/{name})"


def compare_command(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run folders (two or more): each one after the first is paired with the first.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Runs on the same samples: a table of all, and paired differences against the first with bootstrap
    intervals, and where each wins."""
    from themisto_env.commands.evalset import wide_console
    from themisto_env.run.compare import compare_many

    if len(run_dirs) < 2:
        raise typer.BadParameter("give at least two run folders", param_hint="RUN_DIRS...")
    result = compare_many(list(run_dirs))
    if as_json:  # two runs: their pair, as before; more: every run and every pair
        typer.echo(json.dumps(result["pairs"][0] if len(run_dirs) == 2 else result, indent=2))
        return
    wide_console().print(runs_table(result["runs"]))
    for pair in result["pairs"]:
        console.print(paired_table(pair))
        for side, key in (("A", "a_wins_most"), ("B", "b_wins_most")):
            for ex in pair[key]:
                console.print(
                    f"{side} wins most on {ex['sample_id']}: ROUGE-L {ex['rouge_l_a']:.2f} vs {ex['rouge_l_b']:.2f}",
                    markup=False,
                )


def runs_table(runs: list[dict]) -> Table:
    """Every run of a comparison: its samples, metrics and per-sample figures with their intervals."""
    from themisto_env.metrics import METRICS

    table = Table(title="runs (95% intervals resample whole trajectories)")
    for column in ("run", "samples", *METRICS, "reward", "tool calls / sample", "tokens / sample"):
        table.add_column(column)
    for run in runs:
        per_sample = run.get("per_sample") or {}
        table.add_row(
            escape(run["label"]),
            str(run["samples"]),
            *(estimate_text(run.get(m)) for m in METRICS),
            estimate_text(per_sample.get("reward")),
            estimate_text(per_sample.get("tool_calls"), 2),
            estimate_text(per_sample.get("tokens"), 0),
        )
    return table


def paired_table(result: dict) -> Table:
    """One pair of `compare_runs`: per metric (and per-sample figure) A, B, A - B with its paired interval."""
    table = Table(
        title=escape(
            f"A = {result['a']}  vs  B = {result['b']}  ({result['shared_samples']} shared samples in "
            f"{result['shared_trajectories']} trajectories, resampled whole)"
        )
    )
    for column in ("metric", "A", "B", "A - B", "95% CI", "A wins / ties / B wins"):
        table.add_column(column)
    for metric, d in [*result["metrics"].items(), *result.get("per_sample", {}).items()]:
        mark = "[bold]" if d["significant"] else ""
        table.add_row(
            metric if metric in result["metrics"] else f"{metric.replace('_', ' ')} / sample",
            f"{d['mean_a']:.3f}",
            f"{d['mean_b']:.3f}",
            f"{mark}{d['mean_diff']:+.3f}",
            escape(f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"),
            f"{d['wins']} / {d['ties']} / {d['losses']}" if "wins" in d else "",
        )
    return table


def report_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders to put in one report.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help=_default_page("report.html"))] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the report in the default browser.")] = False,
) -> None:
    """An HTML report with plots: metrics by run, score along the trajectory, tool usage."""
    from themisto_env.run.report import write_report

    path = write_report(list(run_dirs), out)
    console.print(f"report: {path}", markup=False)
    if open_page:
        note = open_in_browser(path)
        if note:
            typer.echo(note, err=True)


def view_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders to browse side by side.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help=_default_page("view.html"))] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in the default browser.")] = False,
) -> None:
    """One HTML page to browse every sample: filters, the runs side by side, transcripts."""
    from themisto_env.run.view import write_view

    path = write_view(list(run_dirs), out)
    typer.echo(path)  # the path alone, unwrapped: `xdg-open $(themisto view RUN)`
    if open_page:
        note = open_in_browser(path)
        if note:
            typer.echo(note, err=True)


def open_in_browser(path: Path) -> str | None:
    """Open a page in the default browser; return why it was not opened (None: it was).

    On Linux without a display (``DISPLAY``, ``WAYLAND_DISPLAY``) no browser is tried: Python's would
    fall back to a text browser in this terminal, or to nothing at all.
    """
    import sys
    import webbrowser

    headless = sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if not headless and webbrowser.open(path.resolve().as_uri()):
        return None
    why = "no display here (a headless machine)" if headless else "no browser found"
    return (
        f"--open: {why}; the page is {path}: copy it to a machine with a browser, or serve its folder "
        f"(python3 -m http.server -d {path.parent}) and open it through an ssh tunnel"
    )


__all__ = ["compare_command", "open_in_browser", "paired_table", "report_command", "runs_table", "view_command"]
