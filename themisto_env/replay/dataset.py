"""A trajectory dataset, opened once per process: its folder, manifest, trajectories and samples.

[`Dataset.open`][themisto_env.replay.Dataset.open] is the one place a dataset is resolved (the bundled data by
default, or a built folder), checked (`read_manifest`) and cached, so the envs, the runner and the bridges
of one process share one read of it. A split's side is a dataset too (`DatasetSplit`): it serves only its
side, and asking it for the other side's samples raises [`SplitError`][themisto_env.errors.SplitError].
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from themisto_env.data.samples import TASKS, Sample, SampleRule, TaskName, make_samples, samples_by_trajectory
from themisto_env.data.splits import (
    DEFAULT_RULE,
    DEFAULT_SPLIT,
    SIDES,
    Leakage,
    Side,
    SplitBy,
    SplitRecord,
    SplitRule,
    assign,
    leakage,
    parse_split,
    read_splits,
    write_split,
)
from themisto_env.data.trajectory import MANIFEST, Manifest, Trajectory, iter_trajectories, read_manifest
from themisto_env.errors import ConfigError, DataError, SplitError
from themisto_env.replay.resolve import Stamp, folder_stamp, resolve_dataset

#: The name of the bundled data (as ``Dataset.open()`` with no argument); ``./bundled`` is a folder.
BUNDLED = "bundled"
#: The folder of a dataset that carries its own snapshots (an exported one: ``themisto data export``).
SNAPSHOTS = "snapshots"

__all__ = ["BUNDLED", "SNAPSHOTS", "Dataset", "DatasetSplit"]


@dataclass(frozen=True)
class _TaskSamples:
    """A task's samples under one rule, with their episodes and an index by sample id."""

    samples: tuple[Sample, ...]
    episodes: Mapping[str, tuple[Sample, ...]]
    positions: Mapping[str, tuple[Sample, int]]  # sample id -> (sample, its index in its episode)


class Dataset:
    """A trajectory dataset folder, checked and read once: open it with
    [`Dataset.open`][themisto_env.replay.Dataset.open].

    Opening the same folder again in a process returns the same object while its ``manifest.json`` and
    ``trajectories.jsonl`` are unchanged; trajectories are read and samples made on first use, then kept.
    The objects it hands out are shared by every user in the process: read them, do not change them::

        dataset = Dataset.open()                      # the bundled data; or Dataset.open("path/to/dataset")
        samples = dataset.samples("next-cell")        # Themisto's sample rule unless one is given
        episodes = dataset.episodes("next-cell")      # trajectory id -> its samples in step order
        train, test = dataset.split(test_size=0.2, by="trajectory", seed=0)

    Attributes:
        path: The dataset folder (absolute).
        manifest: Its manifest (format, backend, package versions, counts).
        whole: The whole dataset (itself; a split's side: the dataset it is a side of), which its splits,
            leakage and split records are of.
        split_label: None for a whole dataset; a split's side says which (``test``, ``NAME:train``; ``""``
            for a side of a split made by [`split`][themisto_env.replay.Dataset.split] and not saved).
    """

    split_label: str | None = None

    def __init__(self, path: Path, manifest: Manifest) -> None:
        """Wrap a folder whose manifest is already read; use [`open`][themisto_env.replay.Dataset.open] (which checks
        and caches)."""
        self.path = path
        self.manifest = manifest
        self.whole: Dataset = self
        self._lock = threading.Lock()
        self._trajectories: Mapping[str, Trajectory] | None = None
        self._by_task: dict[tuple[TaskName, SampleRule], _TaskSamples] = {}
        self._views: dict[tuple[SplitRule, Side, str | None], DatasetSplit] = {}

    @classmethod
    def open(
        cls,
        name_or_path: str | Path | None = None,
        *,
        backend: str = "local",
        progress: bool = True,
        split: str | None = None,
    ) -> Dataset:
        """The dataset ``name_or_path`` names, checked, and the same object for the same folder.

        Args:
            name_or_path: A folder built by ``themisto data build``; None or ``"bundled"`` for the bundled
                data (replayed into the cache on first use on a backend, which takes minutes).
            backend: The sandbox backend the bundled data is replayed on (a folder is used as built).
            progress: Show progress (on stderr) while the bundled data is replayed.
            split: Only this side of a split ([`view`][themisto_env.replay.Dataset.view]): ``train``, ``test``,
                ``NAME:train``, ...

        Returns:
            The opened dataset; the cached one when this process opened the folder before and its files
            are unchanged since.

        Raises:
            DataError: The folder does not exist, or is not a dataset of a format version this package
                reads (the message names the file).
            ConfigError: ``split`` names no split of the dataset, or leaves a side empty.
        """
        whole = cls._open_whole(name_or_path, backend=backend, progress=progress)
        return whole if split is None else whole.view(split)

    @classmethod
    def _open_whole(cls, name_or_path: str | Path | None, *, backend: str, progress: bool) -> Dataset:
        if name_or_path is None or str(name_or_path) == BUNDLED:
            folder = resolve_dataset(None, backend=backend, progress=progress)
        else:
            folder = Path(name_or_path)
            if not folder.is_dir():
                raise DataError(
                    f"no dataset folder here; give a folder built by `themisto data build`, or {BUNDLED!r} for "
                    "the bundled data",
                    path=folder,
                )
            if not (folder / MANIFEST).exists() and (folder / "folder-build.json").exists():
                built = sorted(p.name for p in folder.iterdir() if (p / MANIFEST).exists())
                raise DataError(
                    f"a folder build (--project-envs): one dataset per kernel environment, in {', '.join(built)}",
                    path=folder,
                )
        folder = folder.resolve()
        with _OPEN_LOCK:
            stamp = folder_stamp(folder)
            cached = _OPENED.get(folder)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            dataset = Dataset(folder, read_manifest(folder))
            _OPENED[folder] = (stamp, dataset)
            return dataset

    def __repr__(self) -> str:
        return f"Dataset({str(self.path)!r}, backend={self.manifest.backend!r})"

    @property
    def snapshot_dir(self) -> Path | None:
        """The dataset's own snapshot store (``snapshots/`` in its folder: an exported dataset), which envs
        over it use unless given another; None: the snapshots are in the cache's store."""
        folder = self.path / SNAPSHOTS
        return folder if folder.is_dir() else None

    # -- splits ----------------------------------------------------------------------------------------

    def split(
        self, test_size: float = DEFAULT_RULE.test_size, by: SplitBy = "trajectory", seed: int = 0
    ) -> tuple[DatasetSplit, DatasetSplit]:
        """The train and test sides of a split (views; nothing is written:
        [`save_split`][themisto_env.replay.Dataset.save_split] does).

        Args:
            test_size: The expected share of groups on the test side (hash-based: see
                `themisto_env.data.splits`).
            by: ``trajectory``, ``user`` or ``notebook``: the group kept on one side.
            seed: Another seed draws another split.

        Raises:
            ConfigError: An invalid option, or a side left empty (the message names seeds that fill both).
        """
        rule = _rule(by=by, test_size=test_size, seed=seed)
        assign(self.trajectories.values(), rule)
        return self._view(rule, "train", None), self._view(rule, "test", None)

    def view(self, split: str) -> DatasetSplit:
        """One side of a named split: ``train`` / ``test`` (the split named ``default``) or ``NAME:train``.

        A dataset whose ``splits.json`` has no ``default`` split is split by
        `DEFAULT_RULE` (by trajectory, test 0.2, seed 0).

        Raises:
            ConfigError: No split has that name, or the split leaves a side empty.
        """
        name, side = parse_split(split)
        rule = self.split_rule(name)
        assign(self.whole.trajectories.values(), rule)
        return self.whole._view(rule, side, name)

    def split_rule(self, name: str = DEFAULT_SPLIT) -> SplitRule:
        """The rule of a named split (``splits.json``; the default rule for ``default`` when not written).

        Raises:
            ConfigError: No split has that name.
        """
        splits = read_splits(self.path)
        if name in splits:
            return splits[name].rule
        if name == DEFAULT_SPLIT:
            return DEFAULT_RULE
        known = ", ".join(sorted({DEFAULT_SPLIT, *splits}))
        raise ConfigError(f"no split named {name!r} in {self.path} (splits: {known}); `themisto data split`")

    def leakage(self, rule: SplitRule, sample_rule: SampleRule | None = None) -> Leakage:
        """The leakage report of a split of the whole dataset (`leakage`)."""
        samples = {task: self.whole.samples(task, sample_rule) for task in TASKS}
        return leakage(self.whole.trajectories.values(), samples, rule)

    def save_split(self, rule: SplitRule, name: str = DEFAULT_SPLIT) -> SplitRecord:
        """Check a split (no side empty), write it into ``splits.json`` under ``name`` and return its record
        (trajectories and samples per side, leakage).

        Raises:
            ConfigError: A side is empty, or the name is invalid.
        """
        assign(self.whole.trajectories.values(), rule)
        record = self.split_record(rule)
        write_split(self.path, name, record)
        return record

    def split_record(self, rule: SplitRule) -> SplitRecord:
        """What a split of the whole dataset holds now: trajectories and samples (Themisto's rule) per side,
        and its leakage report (a side may be empty here: it is counted, not refused)."""
        whole = self.whole
        sides = assign(whole.trajectories.values(), rule, require_both=False)
        samples = {task: whole.samples(task) for task in TASKS}
        return SplitRecord(
            rule=rule,
            trajectories={side: sum(s == side for s in sides.values()) for side in SIDES},
            samples={
                task: {side: sum(sides[s.trajectory_id] == side for s in listed) for side in SIDES}
                for task, listed in samples.items()
            },
            leakage=leakage(whole.trajectories.values(), samples, rule),
        )

    def split_report(self) -> dict[str, dict[str, Any]]:
        """Every named split as it holds now (``themisto data info``): per name, its rule, whether it is
        written in ``splits.json`` (``default`` is listed with the default rule when not), trajectories and
        samples per side, and the leakage report."""
        written = read_splits(self.path)
        rules = {name: record.rule for name, record in written.items()}
        rules.setdefault(DEFAULT_SPLIT, DEFAULT_RULE)
        return {
            name: {"written": name in written, **self.split_record(rule).model_dump(exclude={"created"})}
            for name, rule in sorted(rules.items())
        }

    def check_served(self, *, trajectory_id: str | None = None, sample_id: str | None = None) -> None:
        """Nothing for a whole dataset; a split's side raises for the other side's trajectory or sample."""

    def _view(self, rule: SplitRule, side: Side, name: str | None) -> DatasetSplit:
        with self._lock:
            view = self._views.get((rule, side, name))
            if view is None:
                view = self._views[(rule, side, name)] = DatasetSplit(self, rule, side, name)
            return view

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickled as its folder: another process opens it again (e.g. a worker, a vector env's subprocess)."""
        return Dataset.open, (str(self.path),)

    def __deepcopy__(self, _memo: dict[int, Any]) -> Dataset:
        """The same object: a dataset is shared, never copied (``gymnasium.make`` copies its options)."""
        return self

    @property
    def trajectories(self) -> Mapping[str, Trajectory]:
        """The trajectories by id, in the order of ``trajectories.jsonl`` (read on first use).

        Raises:
            DataError: A line of ``trajectories.jsonl`` is malformed (the message names the row and field).
        """
        with self._lock:
            if self._trajectories is None:
                self._trajectories = MappingProxyType({t.id: t for t in iter_trajectories(self.path)})
            return self._trajectories

    def samples(self, task: TaskName = "next-cell", rule: SampleRule | None = None) -> list[Sample]:
        """A task's samples under ``rule`` (Themisto's by default), in trajectory and step order (the order
        of [`make_samples`][themisto_env.data.make_samples])."""
        return list(self._task_samples(task, rule).samples)

    def episodes(self, task: TaskName = "next-cell", rule: SampleRule | None = None) -> dict[str, list[Sample]]:
        """A task's samples grouped by trajectory (one episode each): trajectory ids in sorted order, each
        trajectory's samples in step order; trajectories without samples are left out."""
        return {tid: list(group) for tid, group in self._task_samples(task, rule).episodes.items()}

    def sample(self, sample_id: str, rule: SampleRule | None = None) -> Sample:
        """The sample of an id (the task is read from the id: ``TRAJECTORY/TASK/STEP``).

        Raises:
            ConfigError: No sample has this id under ``rule`` (the message suggests the nearest ids).
        """
        return self._position(sample_id, rule)[0]

    def episode_position(self, sample_id: str, rule: SampleRule | None = None) -> tuple[str, int]:
        """Where a sample is in the episodes: its trajectory id and its index among that trajectory's
        samples (what ``env.reset(options={"trajectory": ..., "sample": ...})`` takes).

        Raises:
            ConfigError: No sample has this id under ``rule``.
        """
        sample, index = self._position(sample_id, rule)
        return sample.trajectory_id, index

    def _position(self, sample_id: str, rule: SampleRule | None) -> tuple[Sample, int]:
        task = sample_id.rsplit("/", 2)[-2] if sample_id.count("/") >= 2 else None
        if task not in TASKS:
            raise ConfigError(f"{sample_id!r} is not a sample id (TRAJECTORY/TASK/STEP, TASK one of {TASKS})")
        positions = self._task_samples(task, rule).positions  # type: ignore[arg-type]
        found = positions.get(sample_id)
        if found is None:
            near = difflib.get_close_matches(sample_id, list(positions), n=3)
            hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
            raise ConfigError(f"no sample {sample_id!r} in {self.path} under {rule or SampleRule()}{hint}")
        return found

    def _task_samples(self, task: TaskName, rule: SampleRule | None) -> _TaskSamples:
        if task not in TASKS:
            raise ConfigError(f"unknown task {task!r}; the tasks are {TASKS}")
        rule = rule or SampleRule()
        trajectories = self.trajectories
        with self._lock:
            made = self._by_task.get((task, rule))
            if made is None:
                samples = make_samples(trajectories.values(), task, rule)
                groups = samples_by_trajectory(samples)
                episodes = {tid: tuple(groups[tid]) for tid in sorted(groups)}
                positions = {s.id: (s, i) for group in episodes.values() for i, s in enumerate(group)}
                made = _TaskSamples(tuple(samples), MappingProxyType(episodes), MappingProxyType(positions))
                self._by_task[(task, rule)] = made
            return made


class DatasetSplit(Dataset):
    """One side of a split of a dataset: only its trajectories and samples.

    Its samples are the whole dataset's samples on this side (the sample rule's length quantile is the
    whole dataset's, so ``train`` and ``test`` together are exactly the whole's samples).

    Attributes:
        whole: The dataset it is a side of.
        rule: The split's rule.
        side: ``train`` or ``test``.
        name: The split's name (None: made by [`Dataset.split`][themisto_env.replay.Dataset.split], not saved).
    """

    def __init__(self, whole: Dataset, rule: SplitRule, side: Side, name: str | None) -> None:
        super().__init__(whole.path, whole.manifest)
        self.whole, self.rule, self.side, self.name = whole, rule, side, name
        if name is None:
            self.split_label = ""
        else:
            self.split_label = side if name == DEFAULT_SPLIT else f"{name}:{side}"

    def __repr__(self) -> str:
        label = self.split_label or f"{self.side} ({self.rule.describe()})"
        return f"Dataset({str(self.path)!r}, backend={self.manifest.backend!r}, split={label!r})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:  # type: ignore[override]
        """Pickled as its folder and split: another process opens the same side."""
        return _open_side, (str(self.path), self.rule.model_dump(), self.side, self.name)

    @property
    def trajectories(self) -> Mapping[str, Trajectory]:
        """This side's trajectories by id, in the whole dataset's order."""
        with self._lock:
            if self._trajectories is None:
                whole = self.whole.trajectories
                self._trajectories = MappingProxyType(
                    {tid: t for tid, t in whole.items() if self.rule.side(t) == self.side}
                )
            return self._trajectories

    def split(self, *args: Any, **kwargs: Any) -> tuple[DatasetSplit, DatasetSplit]:  # type: ignore[override]
        raise ConfigError("split the whole dataset, not a side of a split")

    def check_served(self, *, trajectory_id: str | None = None, sample_id: str | None = None) -> None:
        """Raise [`SplitError`][themisto_env.errors.SplitError] for a trajectory or sample of the other side.

        Raises:
            SplitError: It is on the other side (unknown ids are left to the caller's own message).
        """
        if sample_id is not None and trajectory_id is None and sample_id.count("/") >= 2:
            trajectory_id = sample_id.rsplit("/", 2)[0]
        trajectory = self.whole.trajectories.get(trajectory_id) if trajectory_id is not None else None
        if trajectory is not None and self.rule.side(trajectory) != self.side:
            what = f"sample {sample_id!r}" if sample_id is not None else f"trajectory {trajectory_id!r}"
            label = f"split {self.name!r}" if self.name else "the split"
            raise SplitError(
                f"{what} is on the {self.rule.side(trajectory)} side of {label} ({self.rule.describe()}); "
                f"this serves only {self.side}"
            )

    def _position(self, sample_id: str, rule: SampleRule | None) -> tuple[Sample, int]:
        self.check_served(sample_id=sample_id)
        return super()._position(sample_id, rule)

    def _task_samples(self, task: TaskName, rule: SampleRule | None) -> _TaskSamples:
        rule = rule or SampleRule()
        whole = self.whole._task_samples(task, rule)
        trajectories = self.trajectories
        with self._lock:
            made = self._by_task.get((task, rule))
            if made is None:
                samples = tuple(s for s in whole.samples if s.trajectory_id in trajectories)
                episodes = {tid: group for tid, group in whole.episodes.items() if tid in trajectories}
                positions = {sid: p for sid, p in whole.positions.items() if p[0].trajectory_id in trajectories}
                made = _TaskSamples(samples, MappingProxyType(episodes), MappingProxyType(positions))
                self._by_task[(task, rule)] = made
            return made


def _rule(**fields: Any) -> SplitRule:
    try:
        return SplitRule(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"split option {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def _open_side(path: str, rule: dict[str, Any], side: Side, name: str | None) -> DatasetSplit:
    """A side of a split of the dataset at ``path`` (what a pickled `DatasetSplit` opens)."""
    return Dataset.open(path)._view(SplitRule(**rule), side, name)


_OPEN_LOCK = threading.Lock()
_OPENED: dict[Path, tuple[Stamp, Dataset]] = {}
"""The datasets this process opened, by folder, with their files' stamp then (a changed file opens anew)."""
