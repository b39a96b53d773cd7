"""Running an agent over a dataset: the episode loop and its executors; results as they finish, resume.

``themisto run`` calls :func:`run`. Each sample becomes one :class:`~themisto_env.run.results.ResultRow` of
``OUT/results.jsonl``, appended and flushed as soon as it is scored; ``OUT/summary.json`` is written at the
end (:mod:`themisto_env.run.results`: the row, reading, the summary). Started again on the same folder, a run
skips the samples already there (a torn last line from a killed run is dropped), so no sample is lost and
none is scored twice; a folder of a run with another config is refused (``force`` starts it over). A sample
whose episode met an infrastructure failure is written with ``infrastructure_error`` set, left out of the
summary, and retried on resume.

A sample whose model calls still failed after their retries (:class:`~themisto_env.errors.ModelError`:
rate limits, 5xx, timeouts; or a 400, 401, malformed reply, never retried) is written with
``model_error`` set (one line): it is neither scored nor an infrastructure failure, is counted in the
summary's ``model_errors``, and is retried on resume. The episode goes on with the next sample (an empty
prediction moves the env on). ``max_retries`` (``--max-retries``) sets the LLM agents' retries;
``fail_on_error`` (``--fail-on-error RATE``) stops the run with one line when more than that fraction of
the samples run so far have model errors, judged once :data:`FAIL_ON_ERROR_MIN_SAMPLES` samples (or all
the run's samples, if fewer) are done; the rows written so far are kept and the summary is written.

With ``samples=K`` (``themisto run --samples K``) the agent predicts each sample K times; the sample's row,
written once all K are scored, keeps the first prediction's fields at the top level and adds ``draws``
(one dict per prediction), and the summary adds pass@k over the execution score and best-of-K for the
text metrics (:mod:`themisto_env.scoring.passk`).

Executors (:data:`EXECUTORS`, chosen by :func:`executor_name`) spread the episodes (:class:`EpisodePlan`:
a trajectory's wanted samples, or a contiguous part of them when there are fewer trajectories than
episodes that can run at once):

``serial``
    One env and agent in this process, one episode after another.
``processes``
    ``workers`` worker processes, each owning its env and kernel; each takes the next trajectory
    (longest first) when it finishes one.
``concurrent``
    With ``max_connections`` set: in this process (or in each of ``workers`` processes), episodes run
    concurrently under asyncio, each with its own agent, env and kernel, the agents calling their models
    with ``ainvoke``; at most ``max_connections`` model calls are in flight over the whole run.
``ray``
    With ``ray`` set (``local``, ``auto`` or a cluster address), ``workers`` Ray actors, each owning its
    env and kernel, on any node of the cluster (:mod:`themisto_env.run.ray_executor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import math
import multiprocessing as mp
import os
import queue as queue_module
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import ConfigError, InfrastructureError, ModelError, ThemistoError
from themisto_env.metrics import api_sequence_score
from themisto_env.redaction import redact
from themisto_env.run.config import RunConfig
from themisto_env.run.results import (
    RESULTS,
    SUMMARY,
    append_row,
    done_samples,
    read_results,
    secrets,
    summarize,
    write_config,
)

FAIL_ON_ERROR_MIN_SAMPLES = 10
"""``fail_on_error`` is judged once this many samples are done (or all of a smaller run's)."""

Rows = Iterator[dict[str, Any]]


class EpisodePlan(NamedTuple):
    """One episode to run: from sample ``first`` of ``trajectory``, until every one of ``samples`` is done."""

    trajectory: str
    first: int
    samples: tuple[str, ...]


Executor = Callable[[RunConfig, list[EpisodePlan]], Rows]
"""An executor runs the episodes (in the order to hand them out) and yields their rows."""


def make_run_agent(config: RunConfig) -> Any:
    """The agent a run's config names, with its model options and retry policy."""
    from themisto_env.agents import make_agent

    try:
        agent = make_agent(config.agent, **config.agent_kwargs())
    except TypeError as exc:  # options the agent does not take (e.g. --model for a baseline), or its own bug
        raise ConfigError(f"agent {config.agent!r} could not be made with these options: {exc}") from None
    if config.max_retries is not None and hasattr(agent, "retry"):  # the LLM agents' RetryPolicy
        agent.retry.max_retries = config.max_retries
    return agent


def env_options(config: RunConfig, agent: Any) -> dict[str, Any]:
    """The environment options a run uses (its observation mode defaults to the agent's)."""
    observation = config.observation or getattr(agent, "observation", None) or "static"
    return {
        "task": config.task,
        "dataset": config.data,
        "backend": config.backend,
        "observation": observation,
        **config.env,
        "samples": config.samples,
    }


def episode_starts(env: ThemistoEnv, wanted: set[str]) -> Iterator[tuple[str, int]]:
    """(trajectory id, first wanted sample index) for each trajectory with wanted samples."""
    for tid in env.episode_ids:
        ids = [s.id for s in env.episode_samples[tid]]
        first = next((i for i, sid in enumerate(ids) if sid in wanted), None)
        if first is not None:
            yield tid, first


def plan_episodes(env: ThemistoEnv, wanted: set[str], parts: int = 1) -> list[EpisodePlan]:
    """The episodes that score the wanted samples, longest first (so that parallel workers end together).

    One episode per trajectory with wanted samples. With ``parts > 1`` (episodes running at once), a
    trajectory with more than half a part's share (``ceil(samples / (2 * parts))``) is cut into contiguous
    pieces of about that size (an episode may start at any sample: the env serves its recorded state), so
    that whoever is free takes the next piece and all end within a piece of each other."""
    plans = []
    piece = math.ceil(len(wanted) / (2 * parts)) if parts > 1 else None
    for tid, first in episode_starts(env, wanted):
        ids = [s.id for s in env.episode_samples[tid]]
        mine = [sid for sid in ids[first:] if sid in wanted]
        count = math.ceil(len(mine) / piece) if piece else 1
        for k in range(count):
            chunk = tuple(mine[k * len(mine) // count : (k + 1) * len(mine) // count])
            plans.append(EpisodePlan(tid, ids.index(chunk[0]), chunk))
    plans.sort(key=lambda p: -len(p.samples))
    return plans


# -- the episode loop ------------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Episode:
    """The bookkeeping of one episode: which samples are left, each sample's predictions, its row.

    The loops (:func:`episode_rows`, :func:`aepisode_rows`) ask the agent, step the env and hand each step
    to :meth:`stepped`, which returns the sample's row once all its predictions are scored.

    With ``samples=K`` in the env the agent is asked K times per sample (the env serves the same sample
    until its K-th prediction). The draws are independent, as pass@k assumes: each starts from the
    observation and ``info`` the first one started from, never from the previous draw's score.
    """

    def __init__(
        self, config: RunConfig, env: ThemistoEnv, agent: Any, options: dict, tid: str, first: int, wanted: set[str]
    ) -> None:
        self.config, self.env, self.agent, self.options, self.wanted = config, env, agent, options, wanted
        self.tid, self.first = tid, first
        self.left = {s.id for s in env.episode_samples[tid][first:]} & wanted
        self._begin_sample({})

    def _begin_sample(self, info: dict[str, Any]) -> None:
        self.drawn: list[tuple[Any, float, dict, dict[str, Any]]] = []  # (action, reward, info, agent record)
        self.failed: list[str] = []  # the model errors of the current sample's predictions
        self.sample_info = info  # what the agent was shown when the current sample began
        self.started, self.started_at = time.perf_counter(), _now()

    def reset(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the env at the episode's first wanted sample, and the agent."""
        obs, info = self.env.reset(options={"trajectory": self.tid, "sample": self.first})
        self.agent.reset(info)
        self._begin_sample(info)
        return obs, info

    def wants_answer(self) -> bool:
        """Whether the agent is asked for the current sample (other samples get an empty prediction)."""
        sample = self.env.current_sample
        return sample is not None and sample.id in self.wanted

    def model_failed(self, exc: ModelError) -> Prediction:
        """Record a model error as the current sample's; the empty prediction that moves the env on."""
        self.failed.append(str(exc))
        return Prediction(text="")

    def stepped(
        self, action: Any, reward: float, done: bool, info: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Take one env step's result: ``(the sample's row if it is now complete, the info to act on)``."""
        if "scored_sample_id" not in info:  # a tool call
            return None, info
        sample = next(s for s in self.env.episode_samples[self.tid] if s.id == info["scored_sample_id"])
        self.drawn.append((action, reward, info, agent_record(self.agent)))
        if info.get("scored_draw", 0) + 1 < self.env.config.samples and not done:
            # The same sample again, as it began (the env serves its observation), as the next draw:
            # the agent starts afresh and never sees the previous draw's score.
            return None, {**self.sample_info, "draw": info["draw"]}
        row = None
        if sample.id in self.wanted:
            self.left.discard(sample.id)
            row = make_row(self.config, self.options, sample, self.drawn, self.started, self.started_at)
            row["model_error"] = self.failed[0] if self.failed else None
        self._begin_sample(info)
        return row, info


def episode_rows(
    config: RunConfig,
    env: ThemistoEnv,
    agent: Any,
    options: dict[str, Any],
    tid: str,
    first: int,
    wanted: Iterable[str],
) -> Rows:
    """One episode of ``env`` from sample ``first`` of trajectory ``tid``: a row per wanted sample."""
    episode = Episode(config, env, agent, options, tid, first, set(wanted))
    obs, info = episode.reset()
    while episode.left:  # the episode stops after its last wanted sample
        try:
            action = agent.act(obs, info) if episode.wants_answer() else Prediction(text="")
        except ModelError as exc:  # recorded as the sample's model_error; an empty prediction moves on
            action = episode.model_failed(exc)
        obs, reward, terminated, truncated, info = env.step(action)
        row, info = episode.stepped(action, reward, terminated or truncated, info)
        if row is not None:
            yield row
        if terminated or truncated:
            break


async def aepisode_rows(
    config: RunConfig,
    env: ThemistoEnv,
    agent: Any,
    options: dict[str, Any],
    tid: str,
    first: int,
    wanted: Iterable[str],
    *,
    call: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    stop: threading.Event | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """:func:`episode_rows` under asyncio: the agent's ``aact``; the env's calls through ``call`` (a blocking
    call run off the event loop); each row as soon as its sample is scored. A set ``stop`` ends the episode
    before the next model call."""
    episode = Episode(config, env, agent, options, tid, first, set(wanted))
    obs, info = await call(episode.reset)
    while episode.left and not (stop is not None and stop.is_set()):
        try:
            action = await agent.aact(obs, info) if episode.wants_answer() else Prediction(text="")
        except ModelError as exc:
            action = episode.model_failed(exc)
        obs, reward, terminated, truncated, info = await call(env.step, action)
        row, info = episode.stepped(action, reward, terminated or truncated, info)
        if row is not None:
            yield row
        if terminated or truncated:
            break


def agent_record(agent: Any) -> dict[str, Any]:
    """What the agent says of the prediction it just made: usage, transcript, model."""
    usage = getattr(agent, "usage", None)
    record = getattr(agent, "model_record", None)
    transcript = getattr(agent, "transcript", None)
    return {
        "usage": usage if hasattr(usage, "as_dict") else None,
        "transcript": list(transcript) if transcript is not None else None,
        "model": record() if callable(record) else None,
    }


def _text(action: Any) -> str:
    return action.text if isinstance(action, Prediction) else ""


def _draw(action: Any, reward: float, info: dict, record: dict[str, Any]) -> dict[str, Any]:
    """One prediction of a sample, as kept in a row's ``draws``."""
    execution = info.get("execution")
    return {
        "prediction": _text(action),
        "scores": info["scores"],
        "reward": reward,
        "execution_score": info.get("execution_score"),
        "passed": bool(execution["passed"]) and not info.get("prediction_failed") if execution else None,
        "prediction_failed": info.get("prediction_failed"),
        "tool_calls": info.get("tool_calls", []),
        "usage": record["usage"].as_dict() if record["usage"] is not None else None,
        "transcript": record["transcript"],
    }


def make_row(
    config: RunConfig,
    options: dict,
    sample: Any,
    drawn: list[tuple[Any, float, dict, dict[str, Any]]],
    started: float,
    started_at: str,
) -> dict[str, Any]:
    """A sample's row: the first prediction's fields; with several predictions, also their ``draws``.
    The trust flags (``infrastructure_error``, ``state_mismatch``, ``recovered``; ``model_error`` is set by
    the caller) cover every prediction: a failure during any of them leaves the whole sample out (and runs
    it again on resume)."""
    action, reward, info, record = drawn[0]
    usages = [r["usage"] for *_, r in drawn if r["usage"] is not None]
    usage = sum(usages[1:], usages[0]) if usages else None  # the agent's spending over all its predictions
    infos = [i for _, _, i, _ in drawn]

    def flag(key: str) -> Any:  # the env accumulates a sample's failures: its last report holds them all
        return next((i[key] for i in reversed(infos) if i.get(key)), None)

    scores = with_api_sequence(info["scores"], _text(action), sample)
    row = {
        "sample_id": sample.id,
        "trajectory_id": sample.trajectory_id,
        "step": sample.step,
        "task": sample.task,
        "agent": config.agent,
        "observation": options["observation"],
        "backend": config.backend,
        "model": record["model"],
        "prediction": _text(action),
        "target": sample.target,
        "scores": scores,
        "reward": reward,
        "execution_score": info.get("execution_score"),
        "tool_calls": info.get("tool_calls", []),
        "forced_submission": bool(info.get("forced_submission")),
        "usage": usage.as_dict() if usage is not None else None,
        "transcript": record["transcript"],
        "seconds": round(time.perf_counter() - started, 4),
        "started_at": started_at,
        "finished_at": _now(),
        "infrastructure_error": flag("infrastructure_error"),
        "state_mismatch": flag("state_mismatch"),
        "recovered": flag("recovered"),
        "state_check": info.get("scored_state", {}).get("check"),
        "prediction_failed": info.get("prediction_failed"),
    }
    if len(drawn) > 1:
        row["draws"] = [_draw(*d) for d in drawn]
        for draw in row["draws"]:
            draw["scores"] = with_api_sequence(draw["scores"], draw["prediction"], sample)
    return row


def with_api_sequence(scores: dict[str, float], prediction: str, sample: Any) -> dict[str, float]:
    """A next-cell sample's scores with JuICe's API-sequence precision, recall and F1 added
    (:func:`themisto_env.metrics.api_sequence_score`); other samples' as they are."""
    if sample.task != "next-cell":
        return scores
    return {**scores, **api_sequence_score(prediction, sample.target).as_dict()}


# -- executors -------------------------------------------------------------------------------------------------


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def limit_threads(workers: int) -> None:
    """Share the CPUs between parallel workers: each worker's kernels get ``cpus // workers`` threads
    for OpenMP and BLAS (numpy, scikit-learn), unless the variables are already set. Without it, every
    kernel starts as many threads as there are CPUs and the workers slow each other down (measured in
    ``benchmarks/bench_scale.py``). Ray does the same for its actors."""
    threads = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, threads)


def serial_rows(config: RunConfig, plans: list[EpisodePlan]) -> Rows:
    """The ``serial`` executor: one env and agent in this process."""
    agent = make_run_agent(config)
    options = env_options(config, agent)
    env = ThemistoEnv(**options)
    try:
        for plan in plans:
            yield from episode_rows(config, env, agent, options, *plan)
    finally:
        env.close()


def in_flight(config: RunConfig, worker: int = 0) -> int:
    """Episodes the ``worker``-th process runs at once: its share of ``max_connections`` (the shares add up
    to it exactly), 1 without it."""
    if config.max_connections is None:
        return 1
    workers = min(config.workers, config.max_connections)
    return config.max_connections // workers + (worker < config.max_connections % workers)


async def concurrent_episodes(
    config: RunConfig,
    take: Callable[[], EpisodePlan | None],
    emit: Callable[[dict[str, Any]], None],
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
                async for row in aepisode_rows(config, env, agent, options, *plan, call=call, stop=stop):
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
                raise _first_failure(payload)
            else:
                break
    finally:
        if thread.is_alive():
            stop.set()
            with contextlib.suppress(RuntimeError):  # the loop already ended
                event_loop.call_soon_threadsafe(task.cancel)
            thread.join()


def _first_failure(exc: BaseException) -> BaseException:
    """The failure inside a task group's ExceptionGroup (a slot's error, as the serial executor raises it)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _worker(config_json: str, tasks: Any, queue: Any, number: int = 0) -> None:
    """A worker process: one env and kernel (or :func:`in_flight` of them, concurrently); takes episode
    plans from ``tasks`` until a None."""
    try:
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
                raise _first_failure(group) from None
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
        queue.put(("done", None))
    except ThemistoError as exc:  # a known failure (no engine, bad data): one line in the parent
        queue.put(("fatal", (isinstance(exc, InfrastructureError), str(exc))))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def process_rows(config: RunConfig, plans: list[EpisodePlan]) -> Rows:
    """The ``processes`` executor: ``workers`` processes, each taking the next episode when free."""
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


EXECUTORS: dict[str, str] = {
    "serial": "themisto_env.run.runner:serial_rows",
    "processes": "themisto_env.run.runner:process_rows",
    "concurrent": "themisto_env.run.runner:concurrent_rows",
    "ray": "themisto_env.run.ray_executor:ray_rows",
}
"""Executors by name: ``"module:function"`` (an :data:`Executor`), imported when used."""


def executor_name(config: RunConfig) -> str:
    """The executor a config asks for: ``ray`` with ``ray`` set; ``processes`` with several workers;
    ``concurrent`` with ``max_connections`` in one process; else ``serial``."""
    if config.ray is not None:
        return "ray"
    if config.workers > 1:
        return "processes"  # each process runs its episodes concurrently when max_connections is set
    return "concurrent" if config.max_connections is not None else "serial"


def executor(name: str) -> Executor:
    """The executor registered as ``name``."""
    module, _, function = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), function)


# -- a run -----------------------------------------------------------------------------------------------------


def run(config: RunConfig, out: str | Path, *, progress: bool = True, force: bool = False) -> dict[str, Any]:
    """Run (or resume) an experiment into ``out``; return the summary (also written to summary.json).

    Raises:
        ConfigError: ``out`` holds a run with another config (``force`` starts it over).
        ModelError: ``fail_on_error`` was exceeded (the rows so far and the summary are written).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    out = Path(out)
    agent = make_run_agent(config)  # a config that cannot run fails here, before anything in out is touched
    env = ThemistoEnv(**env_options(config, agent))  # resolves (and if needed builds) the dataset
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_config(out, config, force=force)
        done = done_samples(out, config.samples)  # other rows (failed, fewer predictions) are run again
        samples = env.samples[: config.limit] if config.limit else env.samples
        wanted = {s.id for s in samples} - done
        plans = plan_episodes(env, wanted, parts=config.max_connections or config.workers)
        if config.data is None and config.ray is None:  # Ray nodes resolve the bundled data themselves
            config = config.model_copy(update={"data": str(env.dataset_dir)})
    finally:
        env.close()
    hidden = secrets(config)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress) as bar, open(out / RESULTS, "a", encoding="utf-8") as f:
        label = f"{config.agent}{f' {config.model}' if config.model else ''} on {config.task}"
        task = bar.add_task(label, total=len(samples), completed=len(samples) - len(wanted))
        rows = executor(executor_name(config))(config, plans)
        stop = None
        try:
            errors = 0
            for ran, row in enumerate(rows, start=1):
                append_row(f, row, hidden)
                bar.advance(task)
                errors += bool(row.get("model_error"))
                stop = _too_many_errors(config, ran, errors, len(wanted), row)
                if stop:
                    break
        finally:
            if hasattr(rows, "close"):  # ends the episodes, workers or actors now, not when collected
                with contextlib.suppress(Exception):
                    rows.close()
    summary = summarize(read_results(out), config)
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    if stop:
        raise ModelError(redact(stop, hidden))
    return summary


def _too_many_errors(config: RunConfig, ran: int, errors: int, total: int, row: dict[str, Any]) -> str | None:
    """Why the run stops (``fail_on_error`` exceeded), or None."""
    if config.fail_on_error is None or not row.get("model_error"):
        return None
    if ran < min(FAIL_ON_ERROR_MIN_SAMPLES, total) or errors / ran <= config.fail_on_error:
        return None
    return (
        f"stopped: {errors} of {ran} samples failed in their model calls ({errors / ran:.0%} > "
        f"--fail-on-error {config.fail_on_error:g}); last: {row['model_error']}"
    )


__all__ = [
    "EXECUTORS",
    "FAIL_ON_ERROR_MIN_SAMPLES",
    "Episode",
    "EpisodePlan",
    "aepisode_rows",
    "env_options",
    "episode_rows",
    "episode_starts",
    "executor",
    "executor_name",
    "limit_threads",
    "make_run_agent",
    "plan_episodes",
    "run",
]
