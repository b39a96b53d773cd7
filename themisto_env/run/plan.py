"""Planning a run: which samples remain (limit, resume) and the episodes that score them.

A run covers ``limit`` samples of its dataset spread over its trajectories (all without a limit; the one
selection of `select_samples`, also the inspect task's and the TRL
export's), or those of its ``sample_ids`` file, minus those its folder already holds with a scored row
(`done_samples`): that is a resume. The samples left are spread over
`EpisodePlan` s, one per trajectory, or contiguous parts of a trajectory when there are fewer
trajectories than episodes that can run at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from themisto_env.data.samples import Sample, episode_starts, read_sample_ids, select_samples
from themisto_env.run.config import RunConfig


class EpisodePlan(NamedTuple):
    """One episode to run: from sample ``first`` of ``trajectory``, until every one of ``samples`` is done."""

    trajectory: str
    first: int
    samples: tuple[str, ...]


@dataclass(frozen=True)
class RunPlan:
    """What a run (or a resume) does.

    Attributes:
        total: The samples the run covers (its ``limit`` applied), done or not.
        wanted: The ids of those still to run (not yet scored with the run's number of predictions).
        episodes: The episodes that score them, longest first.
    """

    total: int
    wanted: frozenset[str]
    episodes: list[EpisodePlan]

    @property
    def done(self) -> int:
        """The samples of the run already scored in its folder."""
        return self.total - len(self.wanted)


def covered_samples(samples: Sequence[Sample], config: RunConfig) -> Sequence[Sample]:
    """The samples a run covers, in dataset order: its ``sample_ids`` (all without), ``limit`` of them
    chosen by its ``selection`` (`select_samples`).

    Raises:
        DataError: The ``sample_ids`` file cannot be read.
        ConfigError: It names a sample the task does not have.
    """
    ids = read_sample_ids(config.sample_ids) if config.sample_ids is not None else None
    return select_samples(samples, config.limit, seed=config.selection_seed, order=config.selection, sample_ids=ids)


def plan_run(
    samples: Sequence[Sample], episodes: Mapping[str, Sequence[Sample]], config: RunConfig, done: set[str]
) -> RunPlan:
    """The run's plan over a task's ``samples`` (in dataset order) and ``episodes`` (the same samples by
    trajectory, each in step order), leaving out the ``done`` ones; its episodes are cut for the episodes
    that run at once (``max_connections``, else ``workers``)."""
    covered = covered_samples(samples, config)
    wanted = {s.id for s in covered} - done
    plans = plan_episodes(episodes, wanted, parts=config.max_connections or config.workers)
    return RunPlan(total=len(covered), wanted=frozenset(wanted), episodes=plans)


def plan_episodes(episodes: Mapping[str, Sequence[Sample]], wanted: set[str], parts: int = 1) -> list[EpisodePlan]:
    """The episodes that score the wanted samples, longest first (so that parallel workers end together).

    One episode per trajectory with wanted samples. With ``parts > 1`` (episodes running at once), a
    trajectory with more than half a part's share (``ceil(samples / (2 * parts))``) is cut into contiguous
    pieces of about that size (an episode may start at any sample: the env serves its recorded state), so
    that whoever is free takes the next piece and all end within a piece of each other."""
    plans = []
    piece = math.ceil(len(wanted) / (2 * parts)) if parts > 1 else None
    for tid, first in episode_starts(episodes, wanted):
        ids = [s.id for s in episodes[tid]]
        mine = [sid for sid in ids[first:] if sid in wanted]
        count = math.ceil(len(mine) / piece) if piece else 1
        for k in range(count):
            chunk = tuple(mine[k * len(mine) // count : (k + 1) * len(mine) // count])
            plans.append(EpisodePlan(tid, ids.index(chunk[0]), chunk))
    plans.sort(key=lambda p: -len(p.samples))
    return plans


__all__ = ["EpisodePlan", "RunPlan", "covered_samples", "plan_episodes", "plan_run"]
