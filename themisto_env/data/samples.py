"""Tasks and samples: which steps of which trajectories are predicted, and what the target is.

Two tasks, as in Themisto: ``next-cell`` predicts the source of step ``k`` (samples from ``k = 1``) and
``output`` predicts step ``k``'s replayed output as text (`themisto_env.sandbox.rendering.render_outputs`;
samples from ``k = 0``). [`SampleRule`][themisto_env.data.SampleRule] says which steps become samples:
Themisto's rule by default, and, following what the person saw, no output sample whose step's replay
disagrees with the recording. `sample_counts` says what each part of the rule kept and dropped.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from themisto_env.data.agreement import DISAGREEMENTS, KINDS
from themisto_env.data.trajectory import Step, Trajectory
from themisto_env.errors import ConfigError, DataError
from themisto_env.sandbox.rendering import render_outputs

TaskName = Literal["next-cell", "output"]
TASKS: tuple[TaskName, ...] = ("next-cell", "output")


class SampleRule(BaseModel):
    """Which steps become samples (Themisto's rule by default).

    Themisto's rule: trajectories of at least 5 executions, no empty targets, no target longer than the
    0.99 quantile of the task's candidate targets. Following the recording, an output sample whose step
    disagrees is dropped (its target is not what the person saw: a random draw, a timing, an error they did
    not get), for every cause by default; a next-cell sample is kept whatever the cause (its target is the
    person's code), unless causes are given (``missing-module``, ``upstream``: the state lacks what the
    person had). Steps with nothing recorded (``unrecorded``) are kept.

    Attributes:
        min_executions: Trajectories with fewer executions give no samples.
        drop_empty: Drop samples whose target is empty (or only whitespace).
        max_length_quantile: Drop targets longer than this quantile of target length; None keeps all.
        follow_recording: Drop samples by the cause of their step's difference from the recording (the two
            sets below); off: none is dropped for it.
        drop_output_causes: The causes that drop an output-prediction sample.
        drop_next_cell_causes: The causes that drop a next-cell sample.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_executions: int = Field(5, ge=1)
    drop_empty: bool = True
    max_length_quantile: float | None = Field(0.99, gt=0, le=1)
    follow_recording: bool = True
    drop_output_causes: frozenset[str] = DISAGREEMENTS
    drop_next_cell_causes: frozenset[str] = frozenset()

    @field_validator("drop_output_causes", "drop_next_cell_causes")
    @classmethod
    def _known_causes(cls, causes: frozenset[str]) -> frozenset[str]:
        unknown = sorted(causes - set(KINDS))
        if unknown:
            raise ValueError(f"unknown cause {unknown[0]!r}; the causes are {', '.join(KINDS)}")
        return causes

    @field_serializer("drop_output_causes", "drop_next_cell_causes")
    def _sorted_causes(self, causes: frozenset[str]) -> list[str]:
        """Sorted: a set's order changes with the process's hash seed, and a run's config (its identity on
        resume) must not."""
        return sorted(causes)

    def drops(self, task: TaskName, step: Step) -> bool:
        """Whether a sample of ``task`` at ``step`` is dropped for the cause of the step's difference."""
        if not self.follow_recording:
            return False
        causes = self.drop_output_causes if task == "output" else self.drop_next_cell_causes
        return step_cause(step) in causes


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


def step_cause(step: Step) -> str:
    """A step's agreement kind (in a trajectory compared before kinds: ``ok`` or ``other`` by its flag)."""
    return step.agreement_kind or ("ok" if step.agrees else "other")


@dataclass(frozen=True)
class SampleCounts:
    """How a rule made a task's samples: candidates, what each filter dropped, and what was kept.

    Attributes:
        candidates: Steps of trajectories long enough (``min_executions``).
        disagreeing: Dropped because the replay disagrees with the recording (``follow_recording``).
        empty: Dropped as empty targets.
        too_long: Dropped as longer than the length quantile.
        kept: The samples.
        short: Steps of trajectories with fewer than ``min_executions`` executions (no candidates).
        by_cause: Of ``disagreeing``, how many each cause dropped.
    """

    candidates: int
    disagreeing: int
    empty: int
    too_long: int
    kept: int
    short: int = 0
    by_cause: dict[str, int] = field(default_factory=dict)


def _apply_rule(
    trajectories: Iterable[Trajectory], task: TaskName, rule: SampleRule, length_limit: float | None = None
) -> tuple[list[Sample], SampleCounts]:
    first = 1 if task == "next-cell" else 0
    trajectories = list(trajectories)
    short = sum(len(t.steps[first:]) for t in trajectories if len(t.steps) < rule.min_executions)
    steps = [(t, s) for t in trajectories if len(t.steps) >= rule.min_executions for s in t.steps[first:]]
    total = len(steps)
    dropped = Counter(step_cause(s) for _, s in steps if rule.drops(task, s))
    if dropped:
        steps = [(t, s) for t, s in steps if not rule.drops(task, s)]
    disagreeing = total - len(steps)
    candidates = [Sample(sample_id(task, t.id, s.index), task, t.id, s.index, target_text(task, s)) for t, s in steps]
    before = len(candidates)
    if rule.drop_empty:
        candidates = [c for c in candidates if c.target.strip()]
    empty = before - len(candidates)
    before = len(candidates)
    if rule.max_length_quantile is not None and candidates:
        limit = length_limit
        if limit is None:
            limit = float(np.quantile([len(c.target) for c in candidates], rule.max_length_quantile))
        candidates = [c for c in candidates if len(c.target) <= limit]
    too_long = before - len(candidates)
    by_cause = {kind: dropped[kind] for kind in KINDS if dropped[kind]}
    return candidates, SampleCounts(total, disagreeing, empty, too_long, len(candidates), short, by_cause)


def _length_limit(trajectories: Sequence[Trajectory], task: TaskName, rule: SampleRule) -> float | None:
    """The target length above which the rule drops a task's samples of these trajectories (None: none)."""
    if rule.max_length_quantile is None:
        return None
    kept = _apply_rule(trajectories, task, rule.model_copy(update={"max_length_quantile": None}))[0]
    return float(np.quantile([len(c.target) for c in kept], rule.max_length_quantile)) if kept else None


def make_samples(trajectories: Iterable[Trajectory], task: TaskName, rule: SampleRule | None = None) -> list[Sample]:
    """All samples of a task over trajectories, in trajectory and step order."""
    return _apply_rule(trajectories, task, rule or SampleRule())[0]


def sample_counts(trajectories: Iterable[Trajectory], task: TaskName, rule: SampleRule | None = None) -> SampleCounts:
    """How many samples of a task the rule keeps, and how many each of its filters drops."""
    return _apply_rule(trajectories, task, rule or SampleRule())[1]


def sample_counts_by_trajectory(
    trajectories: Iterable[Trajectory], task: TaskName, rule: SampleRule | None = None
) -> dict[str, SampleCounts]:
    """`sample_counts` of each trajectory, under the rule as applied to all of them (the length
    quantile is the dataset's): what the rule kept and dropped of each, and why."""
    rule = rule or SampleRule()
    trajectories = list(trajectories)
    limit = _length_limit(trajectories, task, rule)
    return {t.id: _apply_rule([t], task, rule, limit)[1] for t in trajectories}


def samples_by_trajectory(samples: Sequence[Sample]) -> dict[str, list[Sample]]:
    """Samples grouped by trajectory, each group in step order."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.trajectory_id, []).append(sample)
    for group in groups.values():
        group.sort(key=lambda s: s.step)
    return groups


def episode_starts(episodes: Mapping[str, Sequence[Sample]], wanted: Collection[str]) -> Iterator[tuple[str, int]]:
    """Where to start each episode that holds wanted samples.

    Args:
        episodes: Samples by trajectory, each in step order
            (`samples_by_trajectory`, an env's
            ``episode_samples``).
        wanted: The sample ids to reach.

    Yields:
        (trajectory id, index of its first wanted sample), in trajectory id order.
    """
    for trajectory_id in sorted(episodes):
        first = next((i for i, s in enumerate(episodes[trajectory_id]) if s.id in wanted), None)
        if first is not None:
            yield trajectory_id, first


SelectionOrder = Literal["spread", "first"]
"""How ``--limit N`` picks its samples: ``spread`` (over trajectories, seeded; the default) or ``first``
(the first N in dataset order)."""


def _rank(seed: int, key: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{key}".encode()).digest()


def selection_order(samples: Sequence[Sample], *, seed: int = 0, order: SelectionOrder = "spread") -> list[Sample]:
    """The samples in the order a limit takes them: the first N of this order are ``--limit N``'s.

    ``spread`` deals the samples round-robin over the trajectories: each trajectory's samples in a seeded
    shuffle, the trajectories in a seeded shuffle, then one sample of each trajectory per round, so that
    ``--limit 20`` over 7 trajectories takes about 3 of each (and a limit of 40 holds the 20 of a limit of 20).
    The shuffles rank each id by a hash of the seed and the id: the same seed picks the same samples on
    every machine and Python version, and a sample's rank does not depend on the other samples. ``first``
    is dataset order.
    """
    if order == "first":
        return list(samples)
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.trajectory_id, []).append(sample)
    dealt = [sorted(group, key=lambda s: _rank(seed, s.id)) for group in groups.values()]
    dealt.sort(key=lambda group: _rank(seed, group[0].trajectory_id))
    return [group[i] for i in range(max(map(len, dealt), default=0)) for group in dealt if i < len(group)]


def select_samples(
    samples: Sequence[Sample],
    limit: int | None = None,
    *,
    seed: int = 0,
    order: SelectionOrder = "spread",
    sample_ids: Sequence[str] | None = None,
) -> list[Sample]:
    """The samples a run, an export or an inspect task covers, in dataset order: the one selection
    ``themisto run``, ``themisto_env.bridges.inspect_task.themisto`` and ``bridges.rl.export`` share.

    Args:
        samples: A task's samples in dataset order ([`samples`][themisto_env.replay.Dataset.samples]).
        limit: At most this many (None: all), taken in `selection_order`.
        seed: The selection's seed (``spread``).
        order: ``spread`` over trajectories (default) or the ``first`` in dataset order.
        sample_ids: Only these samples (``--sample-ids FILE``: `read_sample_ids`); the limit then
            applies among them.

    Raises:
        ConfigError: An id of ``sample_ids`` is not among the samples (the nearest ones suggested).
    """
    pool: Sequence[Sample] = samples
    if sample_ids is not None:
        by_id = {s.id: s for s in samples}
        unknown = [sid for sid in sample_ids if sid not in by_id]
        if unknown:
            near = difflib.get_close_matches(unknown[0], list(by_id), n=3)
            hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise ConfigError(f"no sample {unknown[0]!r}{more} among the task's {len(samples)} samples{hint}")
        wanted = set(sample_ids)
        pool = [s for s in samples if s.id in wanted]
    if limit is None or limit >= len(pool):
        return list(pool)
    chosen = {s.id for s in selection_order(pool, seed=seed, order=order)[:limit]}
    return [s for s in pool if s.id in chosen]


def read_sample_ids(path: str | Path) -> list[str]:
    """The sample ids of a file: one a line (blank lines and ``#`` comments skipped), or the rows of a
    ``results.jsonl`` (their ``sample_id``), so that a run's samples can be pinned for another.

    Raises:
        DataError: The file cannot be read, a JSON line has no ``sample_id``, or it holds no id (the message
            names the file and line).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the sample ids: {exc}", path=path) from None
    ids: list[str] = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                line = json.loads(line)["sample_id"]
            except (ValueError, KeyError, TypeError):
                raise DataError(
                    "a JSON line needs a sample_id (a row of results.jsonl)", path=path, row=number
                ) from None
        if line not in ids:
            ids.append(str(line))
    if not ids:
        raise DataError("no sample ids in the file (one a line, or a results.jsonl)", path=path)
    return ids
