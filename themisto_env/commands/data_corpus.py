"""The per-notebook table of a dataset as ``themisto data info`` and ``themisto data build`` print it."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from themisto_env.commands.common import console
from themisto_env.data.samples import TASKS, SampleRule

FEW_NOTEBOOKS = 20
"""A build prints every notebook's row up to this many notebooks; past it, only `MOST_DROPPED`."""
MOST_DROPPED = 10
"""How many rows (those with most drops) a build prints for a dataset of many notebooks."""


def _causes(pairs: list[list[Any]]) -> str:
    return ", ".join(f"{cause} {n}" for cause, n in pairs)


def _dropped(row: dict[str, Any], task: str) -> int:
    return sum(row["dropped"][task].values())


def print_corpus(corpus: dict[str, Any], title: str, *, shown: int | None = None) -> None:
    """Print the table of `themisto_env.data.corpus.CorpusTable.to_json`: a row per notebook and the total.

    Args:
        corpus: The table (``data info --json``'s ``corpus``).
        title: The table's title.
        shown: At most this many notebook rows, those with most drops (None: all, in dataset order); a
            line then says how many are left out.
    """
    rows = corpus["notebooks"]
    if shown is not None and len(rows) > shown:
        rows = sorted(rows, key=lambda r: -sum(_dropped(r, t) for t in TASKS))[:shown]
    table = Table(title=escape(title))
    table.add_column("notebook", overflow="fold")
    table.add_column("sessions", justify="right")
    table.add_column("executions", justify="right")
    for task in TASKS:
        table.add_column(f"{task}\nkept / dropped", justify="right")
    table.add_column("largest drop causes", overflow="fold")
    for row in [*rows, corpus["total"]]:
        counts = [f"{row['kept'][task]} / {_dropped(row, task)}" for task in TASKS]
        causes = "\n".join(f"{task}: {_causes(row['top_causes'][task])}" for task in TASKS if row["top_causes"][task])
        table.add_row(
            escape(row["notebook"]), str(row["trajectories"]), str(row["executions"]), *counts, escape(causes),
            style="bold" if row is corpus["total"] else None, end_section=bool(rows) and row is rows[-1],
        )  # fmt: skip
    console.print(table)
    left_out = len(corpus["notebooks"]) - len(rows)
    if left_out:
        console.print(
            f"  ... {left_out} more notebooks with fewer drops (themisto data info DIR lists all)", markup=False
        )


def print_build_samples(corpus: dict[str, Any], folder: str) -> None:
    """A build's closing lines about its samples: the rule, the total kept and dropped per task with the
    three largest causes, then the per-notebook table (the `MOST_DROPPED` rows with most drops past
    `FEW_NOTEBOOKS` notebooks)."""
    rule = SampleRule()
    quantile = f"{rule.max_length_quantile:g}" if rule.max_length_quantile is not None else None
    total = corpus["total"]
    kept = "; ".join(f"{task} {total['kept'][task]} kept, {_dropped(total, task)} dropped" for task in TASKS)
    console.print(
        f"samples in {folder} (rule: at least {rule.min_executions} executions, empty targets dropped"
        + (f", targets longer than the {quantile} quantile dropped" if quantile else "")
        + f", outputs that disagree with the recording dropped): {kept}",
        markup=False,
        soft_wrap=True,
    )
    causes = "; ".join(f"{task}: {_causes(total['top_causes'][task]) or 'none'}" for task in TASKS)
    console.print(f"largest drop causes: {causes}", markup=False, soft_wrap=True)
    shown = None if len(corpus["notebooks"]) <= FEW_NOTEBOOKS else MOST_DROPPED
    print_corpus(corpus, f"samples per notebook in {folder}", shown=shown)


def print_build_timing(timing: dict[str, Any], workers: int) -> None:
    """A build's timing line: executions per second per worker and the shares of snapshots and second
    replays in the replay time (`themisto_env.build.timing.timing_summary`); nothing when no
    session was replayed here."""
    rate = timing["executions_per_s_per_worker"]
    if rate is None:
        return

    def share(key: str) -> str:
        return f"{timing[key]:.1%}" if timing[key] is not None else "n/a"

    console.print(
        f"timing: {timing['executions']} executions in {timing['replay_s']:.1f} s of replay on {workers} "
        f"worker(s): {rate:.2f} executions/s per worker; snapshots {share('snapshot_share')}, second replays "
        f"{share('second_replay_share')}, keeping the state for them {share('keep_state_share')} of it",
        markup=False,
        soft_wrap=True,
    )


__all__ = ["FEW_NOTEBOOKS", "MOST_DROPPED", "print_build_samples", "print_build_timing", "print_corpus"]
