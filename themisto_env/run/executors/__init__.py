"""The executors: how a run's episodes are spread over processes, event loops and machines.

An executor (`Executor`) takes the run's config and its episodes (in the order to hand them out)
and yields their [`ResultRow`][themisto_env.run.ResultRow] s as samples are scored. Closing the rows
ends the episodes, workers or actors at once. `executor_for` picks one from the config:

`serial_rows`
    One env and agent in this process, one episode after another.
``processes`` (`processes`)
    ``workers`` worker processes, each owning its env and kernel (or, with ``max_connections``, its
    share of concurrent episodes); each takes the next episode (longest first) when it finishes one.
``concurrent`` (`concurrent`)
    With ``max_connections`` in one process: episodes run concurrently under asyncio, each with its own
    agent, env and kernel, the agents calling their models with ``ainvoke``; at most ``max_connections``
    model calls are in flight.
``ray`` (`ray_actors`)
    With ``ray`` set (``local``, ``auto`` or a cluster address), ``workers`` Ray actors, each owning its
    env and kernel, on any node of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from themisto_env.env.core import ThemistoEnv
from themisto_env.run.config import RunConfig
from themisto_env.run.plan import EpisodePlan
from themisto_env.run.results import ResultRow
from themisto_env.run.rollout import env_options, episode_rows, make_run_agent

Rows = Iterator[ResultRow]
Executor = Callable[[RunConfig, list[EpisodePlan]], Rows]
"""An executor runs the episodes (in the order to hand them out) and yields their rows."""


def serial_rows(config: RunConfig, plans: list[EpisodePlan]) -> Rows:
    """Run the episodes one after another with one env and agent in this process; yield their rows."""
    agent = make_run_agent(config)
    options = env_options(config, agent)
    env = ThemistoEnv(**options)
    try:
        for plan in plans:
            yield from episode_rows(config, env, agent, options, *plan)
    finally:
        env.close()


def executor_for(config: RunConfig) -> Executor:
    """The executor a config asks for: Ray actors with ``ray`` set; processes with several workers;
    asyncio with ``max_connections`` in one process; else `serial_rows`. Each is imported when used."""
    if config.ray is not None:
        from themisto_env.run.executors.ray_actors import ray_rows

        return ray_rows
    if config.workers > 1:  # each process runs its episodes concurrently when max_connections is set
        from themisto_env.run.executors.processes import process_rows

        return process_rows
    if config.max_connections is not None:
        from themisto_env.run.executors.concurrent import concurrent_rows

        return concurrent_rows
    return serial_rows


__all__ = ["Executor", "Rows", "executor_for", "serial_rows"]
