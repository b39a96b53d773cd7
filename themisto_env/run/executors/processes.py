"""The ``processes`` executor: ``workers`` processes, each owning its env and kernel (or, with
``max_connections``, its share of concurrent episodes), each taking the next episode when free."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import traceback
from typing import Any

from themisto_env import trace_export
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import InfrastructureError, ThemistoError
from themisto_env.run.config import RunConfig
from themisto_env.run.executors import Rows
from themisto_env.run.executors.concurrent import concurrent_episodes
from themisto_env.run.executors.sharing import first_failure, in_flight, limit_threads
from themisto_env.run.plan import EpisodePlan
from themisto_env.run.rollout import env_options, episode_rows, make_run_agent


def _worker(config_json: str, tasks: Any, queue: Any, number: int = 0) -> None:
    """A worker process: one env and kernel (or `in_flight` of them, concurrently); takes episode
    plans from ``tasks`` until a None and puts ``("row", row)`` on ``queue``, then ``("done", None)``; a
    known failure as ``("fatal", (is an infrastructure failure, message))``, any other as ``("error", traceback)``."""
    try:
        with trace_export.configured():  # as the parent was told (--trace, OTEL_*)
            _work(config_json, tasks, queue, number)
        queue.put(("done", None))
    except ThemistoError as exc:  # a known failure (no engine, bad data): one line in the parent
        queue.put(("fatal", (isinstance(exc, InfrastructureError), str(exc))))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def _work(config_json: str, tasks: Any, queue: Any, number: int) -> None:
    """The worker's work (see `_worker`)."""
    config = RunConfig.model_validate_json(config_json)
    slots = in_flight(config, number)
    limit_threads(config.workers * slots)
    if config.max_connections is not None:
        lock = threading.Lock()
        ended = False

        def take() -> EpisodePlan | None:
            nonlocal ended
            with lock:
                if ended:
                    return None
                plan = tasks.get()
                ended = plan is None
                return EpisodePlan(*plan) if plan is not None else None

        try:
            asyncio.run(concurrent_episodes(config, take, lambda row: queue.put(("row", row)), slots=slots))
        except BaseExceptionGroup as group:
            raise first_failure(group) from None
    else:
        agent = make_run_agent(config)
        options = env_options(config, agent)
        env = ThemistoEnv(**options)
        try:
            while (plan := tasks.get()) is not None:
                for row in episode_rows(config, env, agent, options, *plan):
                    queue.put(("row", row))
        finally:
            env.close()


def process_rows(config: RunConfig, plans: list[EpisodePlan]) -> Rows:
    """Run the episodes on ``workers`` processes, each taking the next episode when free; yield their rows."""
    ctx = mp.get_context("spawn")
    queue, tasks = ctx.Queue(), ctx.Queue()
    count = min(config.workers, config.max_connections or config.workers, len(plans))
    for plan in [*plans, *([None] * (config.max_connections or count))]:  # a None ends each worker's slots
        tasks.put(tuple(plan) if plan is not None else None)
    config_json = config.model_dump_json()
    procs = [ctx.Process(target=_worker, args=(config_json, tasks, queue, i), daemon=True) for i in range(count)]
    for p in procs:
        p.start()
    running = len(procs)
    try:
        while running:
            kind, payload = queue.get()
            if kind == "row":
                yield payload
            elif kind == "done":
                running -= 1
            elif kind == "fatal":
                infrastructure, message = payload
                raise (InfrastructureError if infrastructure else ThemistoError)(message)
            else:
                raise RuntimeError(f"a worker failed:\n{payload}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


__all__ = ["process_rows"]
