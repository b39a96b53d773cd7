"""Train/test splits of a trajectory dataset that cannot leak, and the file that keeps them.

A split puts whole groups (a trajectory, a person's or a notebook's trajectories) on one side, decided by
the sha256 of the seed and the group's key alone: the same on every machine, and a trajectory keeps its
side when the dataset grows (on a small dataset the test share is only near ``test_size``). Named splits
are kept in ``splits.json`` beside the manifest (the rule is what counts); a dataset without one is split by
`DEFAULT_RULE`. `leakage` reports trajectories on both sides and test targets found verbatim in train.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.data.samples import Sample
from themisto_env.data.trajectory import Trajectory
from themisto_env.data.writes import write_text_atomic
from themisto_env.errors import ConfigError, DataError

__all__ = [
    "DEFAULT_RULE",
    "DEFAULT_SPLIT",
    "SIDES",
    "SPLITS",
    "Leakage",
    "Side",
    "SplitBy",
    "SplitRecord",
    "SplitRule",
    "assign",
    "leakage",
    "parse_split",
    "read_splits",
    "write_split",
]

SPLITS = "splits.json"
"""The file beside ``manifest.json`` that keeps a dataset's named splits."""
SPLITS_FORMAT = "themisto-splits"
Side = Literal["train", "test"]
SIDES: tuple[Side, ...] = ("train", "test")
SplitBy = Literal["trajectory", "user", "notebook"]
DEFAULT_SPLIT = "default"
"""The name a split gets when none is given (``--split test`` means ``default:test``)."""


class SplitRule(BaseModel):
    """How a split assigns trajectories to sides.

    Attributes:
        by: The group kept on one side: ``trajectory``, ``user`` (all of a person's trajectories) or
            ``notebook`` (all trajectories of one notebook name). A trajectory without a user (or notebook
            name) is its own group.
        test_size: The share of groups (expected, not exact: see the module doc) on the test side.
        seed: Another seed draws another split.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    by: SplitBy = "trajectory"
    test_size: float = Field(0.2, gt=0, lt=1)
    seed: int = 0

    def key(self, trajectory: Trajectory) -> str:
        """The group key of a trajectory under this rule."""
        if self.by == "user" and trajectory.user_id:
            return f"user:{trajectory.user_id}"
        if self.by == "notebook" and trajectory.notebook_name:
            return f"notebook:{trajectory.notebook_name}"
        return f"trajectory:{trajectory.id}"

    def side(self, trajectory: Trajectory) -> Side:
        """The side of a trajectory: decided by its group key and the seed alone."""
        digest = hashlib.sha256(f"themisto-split\0{self.seed}\0{self.key(trajectory)}".encode()).digest()
        return "test" if int.from_bytes(digest[:8], "big") / 2**64 < self.test_size else "train"

    def describe(self) -> str:
        """``by trajectory, test 0.2, seed 0``."""
        return f"by {self.by}, test {self.test_size:g}, seed {self.seed}"


DEFAULT_RULE = SplitRule()
"""The rule of a dataset with no ``splits.json``: by trajectory, test 0.2, seed 0. On the bundled data (6
trajectories) it puts 1 trajectory in test (``store-sales``), as it does by notebook; by user, 1 too
(``diabetes-regression``)."""


class Leakage(BaseModel):
    """What the two sides of a split share.

    Attributes:
        trajectories_on_both_sides: Trajectories with samples on both sides (must be 0).
        groups_on_both_sides: Groups (users, notebooks) with trajectories on both sides (must be 0).
        verbatim_test_targets: Per task, the test samples whose whitespace-normalised target equals a train
            sample's target of that task.
        test_samples: Per task, the test samples (what ``verbatim_test_targets`` is out of).
    """

    model_config = ConfigDict(extra="forbid")

    trajectories_on_both_sides: int = 0
    groups_on_both_sides: int = 0
    verbatim_test_targets: dict[str, int] = Field(default_factory=dict)
    test_samples: dict[str, int] = Field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report as short lines (``themisto data split`` and ``data info`` print them)."""
        lines = [
            f"trajectories on both sides: {self.trajectories_on_both_sides}",
            f"groups on both sides: {self.groups_on_both_sides}",
        ]
        for task, n in self.verbatim_test_targets.items():
            total = self.test_samples.get(task, 0)
            lines.append(f"{task}: {n} of {total} test targets occur verbatim (whitespace normalised) in train")
        return lines


class SplitRecord(BaseModel):
    """A named split as ``splits.json`` keeps it: its rule, and what it held when written.

    Attributes:
        rule: The assignment rule (what counts when the dataset grows).
        created: When it was written (UTC, ISO 8601).
        trajectories: Trajectories per side then.
        samples: Samples per task and side then (Themisto's sample rule).
        leakage: The leakage report then.
    """

    model_config = ConfigDict(extra="forbid")

    rule: SplitRule
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    trajectories: dict[str, int] = Field(default_factory=dict)
    samples: dict[str, dict[str, int]] = Field(default_factory=dict)
    leakage: Leakage = Field(default_factory=Leakage)


class _SplitsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["themisto-splits"] = SPLITS_FORMAT
    version: int = 1
    splits: dict[str, SplitRecord] = Field(default_factory=dict)


def assign(trajectories: Iterable[Trajectory], rule: SplitRule, *, require_both: bool = True) -> dict[str, Side]:
    """The side of every trajectory under ``rule``.

    Args:
        trajectories: The dataset's trajectories.
        rule: The rule.
        require_both: Refuse an assignment that leaves a side empty (with two groups or more).

    Returns:
        Trajectory id -> ``train`` or ``test``.

    Raises:
        ConfigError: A side is empty (the message names seeds that fill both sides, when there are any).
    """
    trajectories = list(trajectories)
    sides: dict[str, Side] = {t.id: rule.side(t) for t in trajectories}
    if require_both and trajectories:
        empty = [side for side in SIDES if side not in sides.values()]
        if empty:
            groups = len({rule.key(t) for t in trajectories})
            others = (rule.model_copy(update={"seed": seed}) for seed in range(200))
            seeds = [other.seed for other in others if len({other.side(t) for t in trajectories}) == 2][:3]
            hint = (
                f"; seeds {', '.join(map(str, seeds))} give both sides (--seed), or change --test"
                if seeds
                else "; there are too few groups to split"
            )
            raise ConfigError(
                f"split {rule.describe()}: the {empty[0]} side is empty ({len(trajectories)} trajectories in "
                f"{groups} groups){hint}"
            )
    return sides


def _normal(text: str) -> str:
    return " ".join(text.split())


def leakage(trajectories: Iterable[Trajectory], samples: Mapping[str, Sequence[Sample]], rule: SplitRule) -> Leakage:
    """The leakage report of a split (see `Leakage`).

    Args:
        trajectories: The dataset's trajectories.
        samples: Per task, the dataset's samples (all of them: the sides are found here).
        rule: The split's rule.
    """
    trajectories = list(trajectories)
    sides = {t.id: rule.side(t) for t in trajectories}
    groups: dict[str, set[Side]] = {}
    for t in trajectories:
        groups.setdefault(rule.key(t), set()).add(sides[t.id])
    report = Leakage(groups_on_both_sides=sum(len(s) == 2 for s in groups.values()))
    both: set[str] = set()
    for task, task_samples in samples.items():
        seen: dict[str, set[Side]] = {}
        for sample in task_samples:
            seen.setdefault(sample.trajectory_id, set()).add(sides[sample.trajectory_id])
        both |= {tid for tid, s in seen.items() if len(s) == 2}
        train = {_normal(s.target) for s in task_samples if sides[s.trajectory_id] == "train"}
        test = [s for s in task_samples if sides[s.trajectory_id] == "test"]
        report.verbatim_test_targets[task] = sum(_normal(s.target) in train for s in test)
        report.test_samples[task] = len(test)
    report.trajectories_on_both_sides = len(both)
    return report


def parse_split(text: str) -> tuple[str, Side]:
    """``"test"`` -> ``("default", "test")``; ``"NAME:train"`` -> ``("NAME", "train")``.

    Raises:
        ConfigError: The side is not ``train`` or ``test``.
    """
    name, sep, side = text.rpartition(":")
    if not sep:
        name = DEFAULT_SPLIT
    if side not in SIDES or not name:
        raise ConfigError(f"split {text!r}: give train or test, or NAME:train / NAME:test for a named split")
    return name, side  # type: ignore[return-value]


def read_splits(folder: str | Path) -> dict[str, SplitRecord]:
    """The named splits of a dataset folder (empty when it has no ``splits.json``).

    Raises:
        DataError: The file is malformed (the message names the file and field).
    """
    path = Path(folder) / SPLITS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise DataError(f"cannot read the splits: {exc.strerror}", path=path) from None
    try:
        return dict(_SplitsFile.model_validate_json(text).splits)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DataError(err["msg"], path=path, field=".".join(map(str, err["loc"]))) from None


def write_split(folder: str | Path, name: str, record: SplitRecord) -> None:
    """Add (or replace) a named split in the dataset's ``splits.json`` (atomically)."""
    if not name or ":" in name or "/" in name:
        raise ConfigError(f"split name {name!r}: a non-empty name without ':' or '/'")
    splits = read_splits(folder)
    splits[name] = record
    write_text_atomic(Path(folder) / SPLITS, _SplitsFile(splits=splits).model_dump_json(indent=2) + "\n")
