"""Tasks and samples: which steps of which trajectories are predicted, and what the target is.

Two tasks, as in Themisto:

* ``next-cell``: given the executions so far (code and outputs) and the live state, predict the source
  of the next executed cell. The target is step ``k``'s source; samples start at ``k = 1``.
* ``output``: given that history and the source of the cell about to run, predict its output as text
  (:func:`themisto_env.rendering.render_outputs` documents the rendering). The target is step ``k``'s
  replayed output; samples start at ``k = 0``.

Themisto's sample rule is the default (:class:`SampleRule`): only trajectories of at least 5 executions,
empty targets dropped, and targets longer than the 0.99 quantile of target length (over the dataset's
candidate targets of that task) dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from themisto_env.rendering import render_outputs
from themisto_env.trajectory import Step, Trajectory

TaskName = Literal["next-cell", "output"]
TASKS: tuple[TaskName, ...] = ("next-cell", "output")


class SampleRule(BaseModel):
    """Which steps become samples (Themisto's rule by default).

    Attributes:
        min_executions: Trajectories with fewer executions give no samples.
        drop_empty: Drop samples whose target is empty (or only whitespace).
        max_length_quantile: Drop targets longer than this quantile of target length; None keeps all.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_executions: int = Field(5, ge=1)
    drop_empty: bool = True
    max_length_quantile: float | None = Field(0.99, gt=0, le=1)


@dataclass(frozen=True)
class Sample:
    """One prediction to make: step ``step`` of trajectory ``trajectory_id`` under a task."""

    id: str
    task: TaskName
    trajectory_id: str
    step: int
    target: str


def target_text(task: TaskName, step: Step) -> str:
    """The text to predict at a step for a task."""
    return step.source if task == "next-cell" else render_outputs(step.outputs)


def sample_id(task: TaskName, trajectory_id: str, step: int) -> str:
    """The id of a sample: stable across runs, used to match results of different agents."""
    return f"{trajectory_id}/{task}/{step}"


def make_samples(trajectories: Iterable[Trajectory], task: TaskName, rule: SampleRule | None = None) -> list[Sample]:
    """All samples of a task over trajectories, in trajectory and step order."""
    rule = rule or SampleRule()
    first = 1 if task == "next-cell" else 0
    candidates = [
        Sample(sample_id(task, t.id, s.index), task, t.id, s.index, target_text(task, s))
        for t in trajectories
        if len(t.steps) >= rule.min_executions
        for s in t.steps[first:]
    ]
    if rule.drop_empty:
        candidates = [c for c in candidates if c.target.strip()]
    if rule.max_length_quantile is not None and candidates:
        limit = float(np.quantile([len(c.target) for c in candidates], rule.max_length_quantile))
        candidates = [c for c in candidates if len(c.target) <= limit]
    return candidates


def samples_by_trajectory(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    """Samples grouped by trajectory, each group in step order."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.trajectory_id, []).append(sample)
    for group in groups.values():
        group.sort(key=lambda s: s.step)
    return groups
