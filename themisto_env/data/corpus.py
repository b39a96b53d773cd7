"""A dataset at a glance: per notebook, its executions, the samples the rule keeps and why it drops the others.

`corpus_table` computes the rows once from the trajectories and a sample rule; ``themisto data info``,
the build's closing lines and the plot (`themisto_env.data.corpus_plot`) all read them. A sample is
dropped for one cause: its session is under ``min_executions`` (`SHORT`), its step's replay disagrees
with the recording (the agreement kind: ``missing-file``, ``nondeterminism``, ...), its target is empty
(`EMPTY`) or longer than the length quantile (`TOO_LONG`, the quantile taken over the whole dataset, as
the rule takes it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto_env.data.samples import TASKS, SampleCounts, SampleRule, TaskName, sample_counts_by_trajectory
from themisto_env.data.trajectory import Trajectory

SHORT = "short-session"
"""Dropped: the session has fewer executions than the rule's ``min_executions``."""
EMPTY = "empty"
"""Dropped: the target is empty."""
TOO_LONG = "too-long"
"""Dropped: the target is longer than the rule's length quantile."""
TOTAL = "total"
"""The name of the total row."""
TOP = 3
"""How many of a row's largest drop causes are named."""


def _causes(counts: SampleCounts) -> Counter[str]:
    """A task's drops of one trajectory by cause."""
    causes: Counter[str] = Counter(counts.by_cause)
    causes.update({SHORT: counts.short, EMPTY: counts.empty, TOO_LONG: counts.too_long})
    return +causes  # zero counts left out


def _largest(causes: Mapping[str, int]) -> dict[str, int]:
    """Causes largest first (ties by name, so the order is the same on every run)."""
    return dict(sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True)
class NotebookRow:
    """One notebook (or the total) of a dataset.

    Attributes:
        notebook: The notebook's name (`TOTAL` for the total row).
        trajectories: Its trajectories (sessions replayed).
        executions: Its executions (steps).
        kept: Per task, the samples the rule keeps.
        dropped: Per task, the samples dropped by cause, largest first.
    """

    notebook: str
    trajectories: int
    executions: int
    kept: dict[TaskName, int]
    dropped: dict[TaskName, dict[str, int]]

    def dropped_total(self, task: TaskName | None = None) -> int:
        """The samples dropped for a task (None: both tasks)."""
        return sum(sum(self.dropped[t].values()) for t in (TASKS if task is None else (task,)))

    def top_causes(self, task: TaskName | None = None, n: int = TOP) -> list[tuple[str, int]]:
        """The ``n`` largest drop causes of a task (None: of both tasks' drops summed), largest first."""
        causes: Counter[str] = Counter()
        for t in TASKS if task is None else (task,):
            causes.update(self.dropped[t])
        return list(_largest(causes).items())[:n]

    def to_json(self) -> dict[str, Any]:
        """The row as ``data info --json`` carries it."""
        return {
            "notebook": self.notebook,
            "trajectories": self.trajectories,
            "executions": self.executions,
            "kept": dict(self.kept),
            "dropped": {task: dict(causes) for task, causes in self.dropped.items()},
            "top_causes": {task: [list(c) for c in self.top_causes(task)] for task in TASKS},
        }


@dataclass(frozen=True)
class CorpusTable:
    """The rows of `corpus_table`: one per notebook, in dataset order, and their sum."""

    rows: list[NotebookRow] = field(default_factory=list)
    total: NotebookRow = field(default_factory=lambda: _sum(TOTAL, []))

    def most_dropped(self, n: int) -> list[NotebookRow]:
        """The ``n`` rows with most drops (both tasks), most first; ties in dataset order."""
        return sorted(self.rows, key=lambda r: -r.dropped_total())[:n]

    def to_json(self) -> dict[str, Any]:
        """The table as ``data info --json`` carries it (``notebooks``, ``total``)."""
        return {"notebooks": [r.to_json() for r in self.rows], "total": self.total.to_json()}


def _sum(name: str, rows: list[NotebookRow]) -> NotebookRow:
    dropped: dict[TaskName, Counter[str]] = {task: Counter() for task in TASKS}
    for row in rows:
        for task in TASKS:
            dropped[task].update(row.dropped[task])
    return NotebookRow(
        notebook=name,
        trajectories=sum(r.trajectories for r in rows),
        executions=sum(r.executions for r in rows),
        kept={task: sum(r.kept[task] for r in rows) for task in TASKS},
        dropped={task: _largest(c) for task, c in dropped.items()},
    )


def notebook_of(trajectory: Trajectory) -> str:
    """The notebook a trajectory is grouped under: its notebook's name, else its source file's, else its id."""
    if trajectory.notebook_name:
        return trajectory.notebook_name
    return Path(trajectory.source_path).name if trajectory.source_path else trajectory.id


def corpus_table(trajectories: Iterable[Trajectory], rule: SampleRule | None = None) -> CorpusTable:
    """Per notebook, the executions, the samples kept per task and the drops by cause, and the total row.

    Args:
        trajectories: A dataset's trajectories.
        rule: The sample rule (default: Themisto's, `SampleRule`).

    Returns:
        One row per notebook name, in the order the notebooks first appear, and their sum: each row's
        counts are `themisto_env.data.samples.sample_counts` of its trajectories under the rule as
        applied to the whole dataset.
    """
    trajectories = list(trajectories)
    per_task = {task: sample_counts_by_trajectory(trajectories, task, rule) for task in TASKS}
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(notebook_of(trajectory), []).append(trajectory)
    rows = []
    for name, members in groups.items():
        parts = [
            NotebookRow(
                name,
                1,
                len(t.steps),
                kept={task: per_task[task][t.id].kept for task in TASKS},
                dropped={task: dict(_causes(per_task[task][t.id])) for task in TASKS},
            )
            for t in members
        ]
        rows.append(_sum(name, parts))
    return CorpusTable(rows, _sum(TOTAL, rows))


def describe_causes(causes: list[tuple[str, int]]) -> str:
    """Causes as ``missing-file 3, upstream 2`` (``none`` when there is none)."""
    return ", ".join(f"{cause} {n}" for cause, n in causes) or "none"


__all__ = [
    "EMPTY",
    "SHORT",
    "TOO_LONG",
    "TOP",
    "TOTAL",
    "CorpusTable",
    "NotebookRow",
    "corpus_table",
    "describe_causes",
    "notebook_of",
]
