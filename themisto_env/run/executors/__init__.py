"""Executors by name: how a run's episodes are spread over processes, event loops and machines.

An executor (`Executor`) takes the run's config and its episodes (in the order to hand them out)
and yields their [`ResultRow`][themisto_env.run.ResultRow] s as samples are scored. Closing the rows
ends the episodes, workers or actors at once. Each executor is one module, imported only when used:

``serial`` (`serial`)
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

import importlib
from collections.abc import Callable, Iterator

from themisto_env.errors import ConfigError, did_you_mean
from themisto_env.run.config import RunConfig
from themisto_env.run.plan import EpisodePlan
from themisto_env.run.results import ResultRow

Rows = Iterator[ResultRow]
Executor = Callable[[RunConfig, list[EpisodePlan]], Rows]
"""An executor runs the episodes (in the order to hand them out) and yields their rows."""

EXECUTORS: dict[str, str] = {
    "serial": "themisto_env.run.executors.serial:serial_rows",
    "processes": "themisto_env.run.executors.processes:process_rows",
    "concurrent": "themisto_env.run.executors.concurrent:concurrent_rows",
    "ray": "themisto_env.run.executors.ray_actors:ray_rows",
}
"""Executors by name: ``"module:function"`` (an `Executor`), imported when used."""


def executor_name(config: RunConfig) -> str:
    """The executor a config asks for: ``ray`` with ``ray`` set; ``processes`` with several workers;
    ``concurrent`` with ``max_connections`` in one process; else ``serial``."""
    if config.ray is not None:
        return "ray"
    if config.workers > 1:
        return "processes"  # each process runs its episodes concurrently when max_connections is set
    return "concurrent" if config.max_connections is not None else "serial"


def executor(name: str) -> Executor:
    """The executor registered as ``name``.

    Raises:
        ConfigError: No executor has that name (the message suggests the nearest one).
    """
    target = EXECUTORS.get(name)
    if target is None:
        known = sorted(EXECUTORS)
        raise ConfigError(
            f"no executor named {name!r}{did_you_mean(name, known, listed=False)} (executors: {', '.join(known)})"
        )
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


__all__ = ["EXECUTORS", "Executor", "Rows", "executor", "executor_name"]
