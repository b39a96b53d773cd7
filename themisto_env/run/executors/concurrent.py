"""The ``concurrent`` executor: episodes run concurrently under asyncio, each with its own agent, env and
kernel, their model calls bounded by ``max_connections``.

`concurrent_episodes` is the event loop's part, shared with the worker processes of the
``processes`` executor (each runs its share of ``max_connections`` this way).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue as queue_module
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from themisto_env.env.core import ThemistoEnv
from themisto_env.run.config import RunConfig
from themisto_env.run.executors import Rows
from themisto_env.run.executors.sharing import first_failure, in_flight, limit_threads
from themisto_env.run.plan import EpisodePlan
from themisto_env.run.results import ResultRow
from themisto_env.run.rollout import aepisode_rows, env_options, make_run_agent


async def concurrent_episodes(
    config: RunConfig,
    take: Callable[[], EpisodePlan | None],
    emit: Callable[[ResultRow], None],
    *,
    slots: int,
    stop: threading.Event | None = None,
) -> None:
    """Run episodes concurrently in this process: ``slots`` slots, each with its own agent, env and kernel,
    taking episodes from ``take`` until it returns None (or ``stop`` is set); the agents' model calls share
    one bound of ``slots``. Each slot's env runs in the slot's own thread, so a slot cancelled (another
    failed, or the run stops) closes its env only after the env's call in progress returns. The first
    failure cancels the other slots and is raised (in an ExceptionGroup) once every env is closed."""
    limit = asyncio.Semaphore(slots)

    async def slot() -> None:
        if (plan := take()) is None:
            return
        agent = make_run_agent(config)
        if hasattr(agent, "limiter"):
            agent.limiter = limit
        options = env_options(config, agent)
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="themisto-slot")
        loop = asyncio.get_running_loop()
        made: list[ThemistoEnv] = []

        def call(function: Callable[..., Any], *args: Any) -> Awaitable[Any]:
            return loop.run_in_executor(thread, function, *args)

        def make() -> ThemistoEnv:
            made.append(ThemistoEnv(**options))
            return made[0]

        def close() -> None:  # queued behind any call still running in the slot's thread
            for env in made:
                env.close()

        try:
            env = await call(make)
            while plan is not None and not (stop is not None and stop.is_set()):
                episode = aepisode_rows(config, env, agent, options, *plan, act=agent.aact, call=call, stop=stop)
                async for row in episode:
                    emit(row)
                plan = take()
        finally:
            closing = thread.submit(close)
            thread.shutdown(wait=False)
            await asyncio.shield(asyncio.wrap_future(closing))

    async with asyncio.TaskGroup() as group:
        for _ in range(slots):
            group.create_task(slot())


def concurrent_rows(config: RunConfig, plans: list[EpisodePlan]) -> Rows:
    """The ``concurrent`` executor in this process (``workers == 1``): the event loop runs in a thread, and
    rows come out as their samples are scored. Closing the rows (the run stops, Ctrl-C) stops new model
    calls, cancels the episodes and waits for their envs to close."""
    limit_threads(in_flight(config))
    todo = list(plans)
    lock = threading.Lock()
    stop = threading.Event()
    rows: queue_module.Queue[tuple[str, Any]] = queue_module.Queue()
    started: queue_module.Queue[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]] = queue_module.Queue()

    def take() -> EpisodePlan | None:
        with lock:
            return todo.pop(0) if todo and not stop.is_set() else None

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        started.put((asyncio.get_running_loop(), task))
        await concurrent_episodes(config, take, lambda row: rows.put(("row", row)), slots=in_flight(config), stop=stop)

    def loop() -> None:
        try:
            asyncio.run(main())
            rows.put(("done", None))
        except BaseException as exc:  # handed to the consumer's thread
            rows.put(("raise", exc))

    thread = threading.Thread(target=loop, name="themisto-episodes", daemon=True)
    thread.start()
    event_loop, task = started.get()
    try:
        while True:
            kind, payload = rows.get()
            if kind == "row":
                yield payload
            elif kind == "raise":
                raise first_failure(payload)
            else:
                break
    finally:
        if thread.is_alive():
            stop.set()
            with contextlib.suppress(RuntimeError):  # the loop already ended
                event_loop.call_soon_threadsafe(task.cancel)
            thread.join()


__all__ = ["concurrent_episodes", "concurrent_rows"]
