"""A trajectory dataset, opened once per process: its folder, manifest, trajectories and samples.

:meth:`Dataset.open` is the one place where a dataset is resolved (the bundled data by default, replayed
into the cache on first use; or a folder built by ``themisto data build``), checked (its manifest and
format version: :func:`~themisto_env.data.trajectory.read_manifest`) and cached: opening the same folder
again in a process returns the same object while its ``manifest.json`` and ``trajectories.jsonl`` are
unchanged, so the envs, the runner and the bridges of one process share one read of the trajectories and
one list of samples per task and rule. Trajectories are read on first use, samples made on first use
(:func:`~themisto_env.data.samples.make_samples`); both are then kept.

Code that needs samples opens a ``Dataset``; only code that serves states builds an env (and hands it the
dataset: ``ThemistoEnv(dataset=dataset, ...)``)::

    dataset = Dataset.open()                      # the bundled data; or Dataset.open("path/to/dataset")
    samples = dataset.samples("next-cell")        # Themisto's sample rule unless one is given
    episodes = dataset.episodes("next-cell")      # trajectory id -> its samples in step order
    sample = dataset.sample(samples[0].id)

The objects handed out (trajectories, samples) are shared by every user of the dataset in the process:
read them, do not change them.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from themisto_env.data.samples import TASKS, Sample, SampleRule, TaskName, make_samples, samples_by_trajectory
from themisto_env.data.trajectory import MANIFEST, TRAJECTORIES, Manifest, Trajectory, iter_trajectories, read_manifest
from themisto_env.errors import ConfigError, DataError
from themisto_env.replay.resolve import resolve_dataset

#: The name of the bundled data (as ``Dataset.open()`` with no argument); ``./bundled`` is a folder.
BUNDLED = "bundled"

__all__ = ["BUNDLED", "Dataset"]


@dataclass(frozen=True)
class _TaskSamples:
    """A task's samples under one rule, with their episodes and an index by sample id."""

    samples: tuple[Sample, ...]
    episodes: Mapping[str, tuple[Sample, ...]]
    positions: Mapping[str, tuple[Sample, int]]  # sample id -> (sample, its index in its episode)


Stamp = tuple[tuple[int, int] | None, ...]
"""What a dataset folder's files looked like when it was opened (modification time and size of each)."""


class Dataset:
    """A trajectory dataset folder, checked and read once: open it with :meth:`Dataset.open`.

    Attributes:
        path: The dataset folder (absolute).
        manifest: Its manifest (format, backend, package versions, counts).
    """

    def __init__(self, path: Path, manifest: Manifest) -> None:
        """Wrap a folder whose manifest is already read; use :meth:`open` (which checks and caches)."""
        self.path = path
        self.manifest = manifest
        self._lock = threading.Lock()
        self._trajectories: Mapping[str, Trajectory] | None = None
        self._by_task: dict[tuple[TaskName, SampleRule], _TaskSamples] = {}

    @classmethod
    def open(cls, name_or_path: str | Path | None = None, *, backend: str = "local", progress: bool = True) -> Dataset:
        """The dataset ``name_or_path`` names, checked, and the same object for the same folder.

        Args:
            name_or_path: A folder built by ``themisto data build``; None or ``"bundled"`` for the bundled
                data (replayed into the cache on first use on a backend, which takes minutes).
            backend: The sandbox backend the bundled data is replayed on (a folder is used as built).
            progress: Show progress (on stderr) while the bundled data is replayed.

        Returns:
            The opened dataset; the cached one when this process opened the folder before and its files
            are unchanged since.

        Raises:
            DataError: The folder does not exist, or is not a dataset of a format version this package
                reads (the message names the file).
        """
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
        folder = folder.resolve()
        with _OPEN_LOCK:
            stamp = _stamp(folder)
            cached = _OPENED.get(folder)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            dataset = cls(folder, read_manifest(folder))
            _OPENED[folder] = (stamp, dataset)
            return dataset

    def __repr__(self) -> str:
        return f"Dataset({str(self.path)!r}, backend={self.manifest.backend!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """Pickled as its folder: another process opens it again (e.g. a worker, a vector env's subprocess)."""
        return Dataset.open, (str(self.path),)

    def __deepcopy__(self, memo: dict[int, Any]) -> Dataset:
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
        of :func:`~themisto_env.data.samples.make_samples`)."""
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


_OPEN_LOCK = threading.Lock()
_OPENED: dict[Path, tuple[Stamp, Dataset]] = {}
"""The datasets this process opened, by folder, with their files' stamp then (a changed file opens anew)."""


def _stamp(folder: Path) -> Stamp:
    stamps: list[tuple[int, int] | None] = []
    for name in (MANIFEST, TRAJECTORIES):
        try:
            stat = (folder / name).stat()
        except OSError:
            stamps.append(None)
        else:
            stamps.append((stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)
