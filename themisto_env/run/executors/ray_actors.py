"""The ``ray`` executor: a run's episodes spread over a Ray cluster (``themisto run --ray ADDRESS``).

Each Ray actor owns an agent, an env and its kernel for the whole run, as a local worker process does;
episodes (`EpisodePlan`, longest first) go to whichever actor is free. An actor returns an episode's rows
when the episode ends and the driver writes them at once (a killed run loses at most the episodes in
flight). A node without a trajectory's snapshots replays its cells instead (same results). ``ADDRESS``
and what every node needs are in docs/ray.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from themisto_env.sandbox.ray.cluster import LOCAL, connect, import_ray, interruptible_children

if TYPE_CHECKING:
    from themisto_env.run.config import RunConfig
    from themisto_env.run.plan import EpisodePlan
    from themisto_env.run.results import ResultRow


class EpisodeWorker:
    """One Ray actor's state: an agent, an env and its kernel, kept for the whole run."""

    def __init__(self, config_json: str) -> None:
        from themisto_env.env.core import ThemistoEnv
        from themisto_env.run.config import RunConfig
        from themisto_env.run.executors.sharing import limit_threads
        from themisto_env.run.rollout import env_options, make_run_agent

        self.config = RunConfig.model_validate_json(config_json)
        limit_threads(self.config.workers)  # Ray sets OMP_NUM_THREADS for its actors; the rest follow
        self.agent = make_run_agent(self.config)
        self.options = env_options(self.config, self.agent)
        with interruptible_children():  # threads and kernels made here can be interrupted
            self.env = ThemistoEnv(**self.options)

    def run(self, plan: tuple[str, int, tuple[str, ...]]) -> list[ResultRow]:
        """The rows of one episode (an `EpisodePlan`)."""
        from themisto_env.run.rollout import episode_rows

        with interruptible_children():  # Ray blocks SIGINT in its workers; kernels started here inherit it
            return list(episode_rows(self.config, self.env, self.agent, self.options, *plan))

    def node(self) -> str:
        """Where this actor runs (host name and process id)."""
        return f"{os.uname().nodename}:{os.getpid()}"

    def close(self) -> None:
        """Close the env and its kernel."""
        self.env.close()


def ray_rows(config: RunConfig, episodes: list[EpisodePlan]) -> Iterator[ResultRow]:
    """Run the episodes on ``config.workers`` Ray actors; yield rows as episodes finish.

    Args:
        config: The run's config (``config.ray`` is the address).
        episodes: The episodes, in the order to hand them out (longest first balances best).

    Yields:
        One result row per wanted sample, as in `themisto_env.run.executors.serial_rows`.
    """
    ray = import_ray()
    if not episodes:
        return
    started = connect(config.ray or LOCAL, num_cpus=config.workers)
    actor_class = ray.remote(num_cpus=1, max_restarts=0)(EpisodeWorker)
    actors = [actor_class.remote(config.model_dump_json()) for _ in range(min(config.workers, len(episodes)))]
    queue = [tuple(plan) for plan in episodes]
    pending: dict[Any, Any] = {}
    try:
        for actor in actors:
            if queue:
                pending[actor.run.remote(queue.pop(0))] = actor
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            actor = pending.pop(done[0])
            rows = ray.get(done[0])  # an actor's error is raised here, with its traceback
            if queue:
                pending[actor.run.remote(queue.pop(0))] = actor
            yield from rows
    finally:
        with contextlib.suppress(Exception):  # an actor that died has nothing left to close
            ray.get([a.close.remote() for a in actors], timeout=60)
        for actor in actors:
            ray.kill(actor)
        if started:
            ray.shutdown()


__all__ = ["EpisodeWorker", "ray_rows"]
