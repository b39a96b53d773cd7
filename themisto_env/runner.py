"""Running an agent over a dataset: episodes, results as they finish, resume, summary.

``themisto run`` calls :func:`run`. Each scored sample becomes one line of ``OUT/results.jsonl``,
appended and flushed as soon as it is scored; ``OUT/summary.json`` is written at the end. Started again
on the same folder, a run skips the samples already there (a torn last line from a killed run is
dropped), so no sample is lost and none is scored twice. A sample whose episode met an infrastructure
failure is written with ``infrastructure_error`` set, left out of the summary, and retried on resume.

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
text metrics (:mod:`themisto_env.passk`).

With ``workers > 1``, trajectories are spread over worker processes, each owning its env and kernel;
each worker takes the next trajectory (longest first) when it finishes one.
With ``ray`` set (``local``, ``auto`` or a cluster address), they are spread over ``workers`` Ray actors
instead (:mod:`themisto_env.ray_runner`), each owning its env and kernel, on any node of the cluster.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from themisto_env.actions import Prediction
from themisto_env.env import ObservationMode, ThemistoEnv
from themisto_env.errors import DataError, InfrastructureError, ModelError, ThemistoError
from themisto_env.metrics import Score, aggregate
from themisto_env.passk import summarize_draws
from themisto_env.samples import TaskName

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.json"
FAIL_ON_ERROR_MIN_SAMPLES = 10
"""``fail_on_error`` is judged once this many samples are done (or all of a smaller run's)."""


class RunConfig(BaseModel):
    """What to run. Pure data: code is chosen by registered name (``agent``).

    Attributes:
        agent: Registered agent name (``themisto_env.agents.AGENTS``).
        agent_options: Keyword arguments for the agent's factory (e.g. provider and model).
        task: ``next-cell`` or ``output``.
        observation: Observation mode; None uses the agent's own (or ``static``).
        backend: Sandbox backend.
        data: A built dataset folder; None uses the bundled data.
        limit: Run at most this many samples (the first ones, in dataset order).
        workers: Worker processes (or Ray actors), each with its own env and kernel.
        ray: None runs on this machine; ``local`` starts a private local Ray instance; ``auto`` or an
            address (``HOST:6379``, ``ray://HOST:10001``) joins a running Ray cluster. Episodes are then
            spread over ``workers`` Ray actors (:mod:`themisto_env.ray_runner`).
        samples: Predictions per sample (pass@k). With K > 1 each row carries the K ``draws`` and the
            summary reports ``pass_at_k`` (with ``env: {execution_score: true}``) and ``best_of_k``.
        max_retries: Retries of a failed model call (LLM agents; None: the agent's default, 5).
        fail_on_error: Stop the run when more than this fraction of the samples done have model errors
            (judged after :data:`FAIL_ON_ERROR_MIN_SAMPLES` samples); None never stops.
        env: Further environment options (see ``EnvConfig``).
    """

    model_config = ConfigDict(extra="forbid")

    agent: str = "repeat-previous"
    agent_options: dict[str, Any] = Field(default_factory=dict)
    task: TaskName = "next-cell"
    observation: ObservationMode | None = None
    backend: str = "local"
    data: str | None = None
    limit: int | None = Field(None, ge=1)
    workers: int = Field(1, ge=1)
    ray: str | None = None
    samples: int = Field(1, ge=1)
    max_retries: int | None = Field(None, ge=0)
    fail_on_error: float | None = Field(None, ge=0, le=1)
    env: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _samples_once(self) -> RunConfig:
        if "samples" in self.env:
            raise ValueError("set the predictions per sample with samples (--samples), not env.samples")
        return self


def _make_agent(config: RunConfig) -> Any:
    from themisto_env.agents import make_agent

    agent = make_agent(config.agent, **config.agent_options)
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


def read_results(out: str | Path) -> list[dict[str, Any]]:
    """The result rows of a run folder; a torn last line (a killed writer) is dropped from the file."""
    path = Path(out) / RESULTS
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):  # torn by a kill: drop it so appends stay well-formed
                path.write_text("".join(lines[:-1]), encoding="utf-8")
                break
            raise DataError("not a JSON line", path=path, row=number) from None
    return rows


def is_scored(row: dict[str, Any]) -> bool:
    """Whether a result row counts: not an infrastructure failure, not served in a mismatched state, no
    failed model call. Rows that do not count are left out of the summary and run again on resume."""
    return not row.get("infrastructure_error") and not row.get("state_mismatch") and not row.get("model_error")


def row_draws(row: dict[str, Any]) -> int:
    """How many predictions a result row holds (1 for a row without ``draws``)."""
    return len(row.get("draws") or ()) or 1


def _episodes(env: ThemistoEnv, wanted: set[str]) -> Iterator[tuple[str, int]]:
    """(trajectory id, first wanted sample index) for each trajectory with wanted samples."""
    for tid in env.episode_ids:
        ids = [s.id for s in env.episode_samples[tid]]
        first = next((i for i, sid in enumerate(ids) if sid in wanted), None)
        if first is not None:
            yield tid, first


def run_episodes(config: RunConfig, trajectory_ids: Iterable[str] | None, wanted: set[str]) -> Iterator[dict]:
    """Run the agent over the wanted samples (of the given trajectories); yield a row per sample."""
    agent = _make_agent(config)
    options = env_options(config, agent)
    env = ThemistoEnv(**options)
    chosen = set(trajectory_ids) if trajectory_ids is not None else None
    try:
        for tid, first in _episodes(env, wanted):
            if chosen is None or tid in chosen:
                yield from episode_rows(config, env, agent, options, tid, first, wanted)
    finally:
        env.close()


def episode_rows(
    config: RunConfig,
    env: ThemistoEnv,
    agent: Any,
    options: dict[str, Any],
    tid: str,
    first: int,
    wanted: set[str],
) -> Iterator[dict]:
    """One episode of ``env`` from sample ``first`` of trajectory ``tid``: a row per wanted sample.

    With ``samples=K`` in the env the agent is asked K times per sample (the env serves the same sample
    until its K-th prediction); the row is yielded once all K are scored. The draws are independent, as
    pass@k assumes: each starts from the observation and ``info`` the first one started from, never
    from the previous draw's score."""
    obs, info = env.reset(options={"trajectory": tid, "sample": first})
    agent.reset(info)
    started = time.perf_counter()
    left = {s.id for s in env.episode_samples[tid][first:]} & wanted
    drawn: list[tuple[Any, float, dict]] = []  # (action, reward, info) of the current sample's predictions
    spent: list[Any] = []  # the agent's usage for each of them
    failed: list[str] = []  # the model errors of the current sample's predictions
    sample_info = info  # what the agent was shown when the current sample began
    while left:  # the episode stops after its last wanted sample
        sample = env.current_sample
        assert sample is not None
        try:
            action = agent.act(obs, info) if sample.id in wanted else Prediction(text="")
        except ModelError as exc:  # recorded as the sample's model_error; an empty prediction moves on
            failed.append(str(exc))
            action = Prediction(text="")
        obs, reward, terminated, truncated, info = env.step(action)
        if "scored_sample_id" in info:  # the env reports each sample's failures with its score
            drawn.append((action, reward, info))
            spent.append(getattr(agent, "usage", None))
            if info.get("scored_draw", 0) + 1 < env.config.samples and not (terminated or truncated):
                # The same sample again, as it began (the env serves its observation), as the next draw:
                # the agent starts afresh and never sees the previous draw's score.
                info = {**sample_info, "draw": info["draw"]}
                continue
            if sample.id in wanted:
                left.discard(sample.id)
                row = _row(config, options, sample, drawn, spent, started)
                row["model_error"] = failed[0] if failed else None
                yield row
            drawn, spent, failed, sample_info = [], [], [], info
            started = time.perf_counter()
        if terminated or truncated:
            break


def _text(action: Any) -> str:
    return action.text if isinstance(action, Prediction) else ""


def _draw(action: Any, reward: float, info: dict) -> dict[str, Any]:
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
    }


def _row(
    config: RunConfig,
    options: dict,
    sample: Any,
    drawn: list[tuple[Any, float, dict]],
    spent: list[Any],
    started: float,
) -> dict[str, Any]:
    """A sample's row: the first prediction's fields; with several predictions, also their ``draws``.
    The trust flags (``infrastructure_error``, ``state_mismatch``, ``recovered``; ``model_error`` is set by
    the caller) cover every prediction: a failure during any of them leaves the whole sample out (and runs
    it again on resume)."""
    action, reward, info = drawn[0]
    usages = [u for u in spent if hasattr(u, "as_dict")]
    usage = sum(usages[1:], usages[0]) if usages else None  # the agent's spending over all its predictions

    infos = [i for _, _, i in drawn]

    def flag(key: str) -> Any:  # the env accumulates a sample's failures: its last report holds them all
        return next((i[key] for i in reversed(infos) if i.get(key)), None)

    row = {
        "sample_id": sample.id,
        "trajectory_id": sample.trajectory_id,
        "step": sample.step,
        "task": sample.task,
        "agent": config.agent,
        "observation": options["observation"],
        "backend": config.backend,
        "prediction": _text(action),
        "target": sample.target,
        "scores": info["scores"],
        "reward": reward,
        "execution_score": info.get("execution_score"),
        "tool_calls": info.get("tool_calls", []),
        "forced_submission": bool(info.get("forced_submission")),
        "usage": usage.as_dict() if hasattr(usage, "as_dict") else None,
        "seconds": round(time.perf_counter() - started, 4),
        "infrastructure_error": flag("infrastructure_error"),
        "state_mismatch": flag("state_mismatch"),
        "recovered": flag("recovered"),
        "state_check": info.get("scored_state", {}).get("check"),
        "prediction_failed": info.get("prediction_failed"),
    }
    if len(drawn) > 1:
        row["draws"] = [_draw(*d) for d in drawn]
    return row


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def limit_threads(workers: int) -> None:
    """Share the CPUs between parallel workers: each worker's kernels get ``cpus // workers`` threads
    for OpenMP and BLAS (numpy, scikit-learn), unless the variables are already set. Without it, every
    kernel starts as many threads as there are CPUs and the workers slow each other down (measured in
    ``benchmarks/bench_scale.py``). Ray does the same for its actors."""
    threads = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, threads)


def _worker(config_json: str, tasks: Any, wanted: list[str], queue: Any) -> None:
    """A worker process: one env and kernel; takes trajectory ids from ``tasks`` until a None."""
    try:
        config = RunConfig.model_validate_json(config_json)
        limit_threads(config.workers)
        chosen = set(wanted)
        agent = _make_agent(config)
        options = env_options(config, agent)
        env = ThemistoEnv(**options)
        firsts = dict(_episodes(env, chosen))
        try:
            while (tid := tasks.get()) is not None:
                for row in episode_rows(config, env, agent, options, tid, firsts[tid], chosen):
                    queue.put(("row", row))
        finally:
            env.close()
        queue.put(("done", None))
    except ThemistoError as exc:  # a known failure (no engine, bad data): one line in the parent
        queue.put(("fatal", (isinstance(exc, InfrastructureError), str(exc))))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def balanced_order(env: ThemistoEnv, wanted: set[str]) -> list[str]:
    """The trajectories with wanted samples, longest (most wanted samples) first, for balanced workers."""
    episodes = [tid for tid, _ in _episodes(env, wanted)]
    episodes.sort(key=lambda tid: -sum(1 for s in env.episode_samples[tid] if s.id in wanted))
    return episodes


def _parallel(config: RunConfig, env: ThemistoEnv, wanted: set[str]) -> Iterator[dict]:
    ctx = mp.get_context("spawn")
    queue, tasks = ctx.Queue(), ctx.Queue()
    episodes = balanced_order(env, wanted)  # handed to whichever worker is free, longest first
    count = min(config.workers, len(episodes))
    for tid in [*episodes, *([None] * count)]:
        tasks.put(tid)
    procs = [
        ctx.Process(target=_worker, args=(config.model_dump_json(), tasks, sorted(wanted), queue), daemon=True)
        for _ in range(count)
    ]
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


def run(config: RunConfig, out: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) an experiment into ``out``; return the summary (also written to summary.json)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG).write_text(config.model_dump_json(indent=2) + "\n")
    # a sample counts as done when scored with as many predictions as asked (other rows are run again)
    done = {r["sample_id"] for r in read_results(out) if is_scored(r) and row_draws(r) == config.samples}
    agent = _make_agent(config)
    env = ThemistoEnv(**env_options(config, agent))  # resolves (and if needed builds) the dataset
    try:
        samples = env.samples[: config.limit] if config.limit else env.samples
        wanted = {s.id for s in samples} - done
        if config.data is None and config.ray is None:  # Ray nodes resolve the bundled data themselves
            config = config.model_copy(update={"data": str(env.dataset_dir)})
    finally:
        env.close()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress) as bar, open(out / RESULTS, "a", encoding="utf-8") as f:
        task = bar.add_task(
            f"{config.agent} on {config.task}", total=len(samples), completed=len(samples) - len(wanted)
        )
        if config.ray is not None:
            from themisto_env.ray_runner import ray_rows

            rows = ray_rows(config, balanced_order(env, wanted), wanted)
        elif config.workers == 1:
            rows = run_episodes(config, None, wanted)
        else:
            rows = _parallel(config, env, wanted)
        stop = None
        try:
            errors = 0
            for ran, row in enumerate(rows, start=1):
                f.write(json.dumps(row) + "\n")
                f.flush()
                bar.advance(task)
                errors += bool(row.get("model_error"))
                stop = _too_many_errors(config, ran, errors, len(wanted), row)
                if stop:
                    break
        finally:
            if hasattr(rows, "close"):  # ends the episodes, workers or actors now, not when collected
                rows.close()
    summary = summarize(read_results(out), config)
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    if stop:
        raise ModelError(stop)
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


def summarize(rows: list[dict[str, Any]], config: RunConfig | None = None) -> dict[str, Any]:
    """Per-metric means with bootstrap intervals over the scored samples (infrastructure failures out).

    The metrics and ``reward`` are those of each sample's first prediction. When rows have ``draws``
    (``samples=K``), :func:`themisto_env.passk.summarize_draws` adds ``draws`` (K), ``best_of_k`` and, with
    the execution score, ``pass_at_k`` (``{"1": {"mean", "ci_low", "ci_high"}, ..., "K": ...}``) and
    ``pass_at_k_counts``."""
    latest = {r["sample_id"]: r for r in rows}
    scored = [r for r in latest.values() if is_scored(r)]
    summary: dict[str, Any] = {
        "agent": config.agent if config else (scored[0]["agent"] if scored else None),
        "task": config.task if config else (scored[0]["task"] if scored else None),
        "observation": scored[0]["observation"] if scored else None,
        "samples": len(scored),
        "infrastructure_failures": sum(1 for r in latest.values() if r.get("infrastructure_error")),
        "state_mismatches": sum(
            1 for r in latest.values() if r.get("state_mismatch") and not r.get("infrastructure_error")
        ),
        "model_errors": sum(
            1
            for r in latest.values()
            if r.get("model_error") and not r.get("infrastructure_error") and not r.get("state_mismatch")
        ),
        "prediction_failures": sum(1 for r in scored if r.get("prediction_failed")),
        "tool_calls": sum(len(r["tool_calls"]) for r in scored),
        "seconds": round(sum(r["seconds"] for r in scored), 2),
    }
    if scored:
        corpus = aggregate([Score(**r["scores"]) for r in scored])
        for metric in ("exact_match", "rouge_l", "chrf"):
            estimate = getattr(corpus, metric)
            summary[metric] = {"mean": estimate.mean, "ci_low": estimate.ci_low, "ci_high": estimate.ci_high}
        summary["reward"] = sum(r["reward"] for r in scored) / len(scored)
        summary.update(summarize_draws(scored, config.samples if config and config.samples > 1 else None))
    return summary
