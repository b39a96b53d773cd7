"""A run folder's records: the result row, reading and appending ``results.jsonl``, the summary.

A run folder (``themisto run --out DIR``) holds:

``config.json``
    The :class:`~themisto_env.run.config.RunConfig` (secrets redacted).
``results.jsonl``
    One :class:`ResultRow` per sample, appended and flushed as soon as the sample is done.
``summary.json``
    :func:`summarize` of the rows: per-metric means with bootstrap intervals, failure counts, tokens.

A row counts (:func:`is_scored`) unless its sample met an infrastructure failure, was served in a state
that differs from the recording, or its model calls failed (``model_error``): those are left out of the
summary and run again on resume. A torn last line (a killed writer) is dropped on read; any other
unreadable line is a :class:`~themisto_env.errors.DataError` naming the file, the line and the field.

No secret is written: :func:`secrets` collects the run's keys (options named like ``api_key``, the
providers' key variables) and :func:`redact` replaces them wherever they appear in a row or the config.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.errors import ConfigError, DataError
from themisto_env.metrics import API_SEQUENCE_METRICS, METRICS, Score, aggregate, estimate_means
from themisto_env.redaction import environment_secrets, redact, secret_values
from themisto_env.run.config import RunConfig
from themisto_env.scoring.passk import summarize_draws

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.json"
USAGE_TOTALS = (
    "model_calls",
    "input_tokens",
    "output_tokens",
    "tool_calls",
    "cached_calls",
    "cached_input_tokens",
    "cached_output_tokens",
)
"""The :class:`~themisto_env.agents.AgentUsage` counts summed into ``summary.json``'s ``usage``."""


class ResultRow(BaseModel):
    """One sample of a run, as written to ``results.jsonl`` (fields unknown here are kept as they are).

    Attributes:
        sample_id, trajectory_id, step, task: The sample.
        agent, observation, backend: How it was run.
        model: ``{"provider", "name", "params"}`` of an LLM agent's model (None for other agents).
        prediction, target: The (first) prediction and the reference.
        scores: The metrics of :data:`~themisto_env.metrics.METRICS` (and, for next-cell, the API
            sequence's), each in [0, 1].
        reward: The env's reward for the prediction.
        execution_score: The execution score (next-cell with ``execution_score``), else None.
        tool_calls: The env's record of the tool calls (``{"tool", "args", "ok"}``).
        forced_submission: The tool budget ran out and the env submitted for the agent.
        usage: What the agent spent (model calls, tokens, tool calls), over all its predictions.
        transcript: The conversation of the (first) prediction: ``{"role", "content", "tool_calls"?,
            "tool_call_id"?}`` messages (None for agents without one).
        seconds: Wall time of the sample.
        started_at, finished_at: ISO-8601 UTC times of the sample's start and end.
        infrastructure_error, state_mismatch, recovered, state_check: What the env reports of the state.
        prediction_failed: Why the prediction's own code failed (execution score), if it did.
        model_error: Why the model calls failed after their retries (the sample is run again on resume).
        draws: With ``samples=K``, each prediction's fields (its own transcript included).
    """

    model_config = ConfigDict(extra="allow")

    sample_id: str
    trajectory_id: str
    step: int
    task: str
    agent: str
    observation: str
    backend: str
    model: dict[str, Any] | None = None
    prediction: str
    target: str
    scores: dict[str, float]
    reward: float
    execution_score: float | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    forced_submission: bool = False
    usage: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] | None = None
    seconds: float
    started_at: str | None = None
    finished_at: str | None = None
    infrastructure_error: str | None = None
    state_mismatch: str | None = None
    recovered: list[Any] | None = None
    state_check: str | None = None
    prediction_failed: str | None = None
    model_error: str | None = None
    draws: list[dict[str, Any]] | None = None


def read_results(out: str | Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The rows of a run folder (as dicts). A torn last line (a killed writer, or a row being written now)
    is left out; with ``repair`` (the runner, before appending) it is also dropped from the file.

    Raises:
        DataError: A line that is not JSON (other than a torn last one), or not a result row (named by
            line and field).
    """
    path = Path(out) / RESULTS
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # torn by a kill: drop it so appends stay well-formed
                if repair:
                    path.write_text("".join(lines[:-1]), encoding="utf-8")
                break
            raise DataError("not a JSON line", path=path, row=number) from None
        try:
            ResultRow.model_validate(row)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(map(str, error["loc"])) or "row"
            raise DataError(f"not a result row: {error['msg']}", path=path, row=number, field=field) from None
        rows.append(row)
    return rows


def append_row(file: IO[str], row: dict[str, Any], secrets: Iterable[str] = ()) -> None:
    """Write one row (validated, secrets redacted) as a line of ``results.jsonl``, and flush it."""
    row = redact(row, secrets)
    try:
        ResultRow.model_validate(row)
    except ValidationError as exc:  # an agent's transcript or model record of the wrong shape
        error = exc.errors()[0]
        field = ".".join(map(str, error["loc"])) or "row"
        raise ConfigError(
            f"the row of {row.get('sample_id')} is not a result row (field {field!r}: {error['msg']}): check "
            f"what agent {row.get('agent')!r} gives as transcript and model_record()"
        ) from None
    file.write(json.dumps(row) + "\n")
    file.flush()


def is_scored(row: dict[str, Any]) -> bool:
    """Whether a result row counts: not an infrastructure failure, not served in a mismatched state, no
    failed model call. Rows that do not count are left out of the summary and run again on resume."""
    return not row.get("infrastructure_error") and not row.get("state_mismatch") and not row.get("model_error")


def row_draws(row: dict[str, Any]) -> int:
    """How many predictions a result row holds (1 for a row without ``draws``)."""
    return len(row.get("draws") or ()) or 1


def model_label(row_or_summary: dict[str, Any]) -> str | None:
    """``provider/name`` of a row's (or summary's) model, or None."""
    model = row_or_summary.get("model")
    if not isinstance(model, dict) or not model.get("provider"):
        return None
    return "/".join(str(part) for part in (model["provider"], model.get("name")) if part)


def run_label(row: dict[str, Any]) -> str:
    """``agent model (observation)``: how a run is named in compare, report and view."""
    model = model_label(row)
    return f"{row['agent']}{f' {model}' if model else ''} ({row['observation']})"


# -- secrets -------------------------------------------------------------------------------------------------


def secrets(config: RunConfig | None = None) -> set[str]:
    """The secret values a run must never write (:mod:`themisto_env.redaction`): those of its options
    (``agent_options``, ``model_args``, the endpoint's URL) and of secret-like environment variables."""
    found = environment_secrets()
    if config is not None:
        found |= secret_values(config.agent_options) | secret_values(config.model_args)
        found |= secret_values(config.base_url or "")
    return found


# -- the run folder --------------------------------------------------------------------------------------------


OPERATIONAL_OPTIONS = frozenset({"timeout", "request_timeout", "max_retries", "retry_delay", "cache"})
"""Agent options that do not change a run's results (they may change between resumes)."""
OPERATIONAL_ENV = frozenset({"snapshot_dir", "warm_kernels", "lazy_state"})
"""Env options that do not change a run's results."""


def run_identity(config: RunConfig) -> dict[str, Any]:
    """What makes a run's rows comparable: the agent and its model options (as the agent gets them, secrets
    redacted, without :data:`OPERATIONAL_OPTIONS`), the task, the observation mode the env will use, the
    backend, the data and the env options (without :data:`OPERATIONAL_ENV`). Resuming a run folder with
    another identity is refused. ``limit``, ``workers``, ``ray``, ``max_retries``, ``fail_on_error``,
    ``max_connections``, ``cache`` and ``samples`` may change (a sample with another number of predictions
    is run again anyway)."""
    from themisto_env.agents.registry import agent_observation

    kwargs = {k: v for k, v in config.agent_kwargs().items() if k not in OPERATIONAL_OPTIONS}
    return redact(
        {
            "agent": config.agent,
            "agent_options": kwargs,
            "task": config.task,
            "observation": config.observation or agent_observation(config.agent) or "static",
            "backend": config.backend,
            "data": config.data,
            "env": {k: v for k, v in config.env.items() if k not in OPERATIONAL_ENV},
        },
        secrets(config),
    )


def write_config(out: Path, config: RunConfig, *, force: bool = False) -> None:
    """Record the run's config in ``out`` (redacted), after checking that it resumes the same run.

    Raises:
        ConfigError: ``out`` holds rows of a run of another :func:`run_identity` (read from its config.json,
            or from its rows when it has none), unless ``force``: then its results and summary are removed.
    """
    path = out / CONFIG
    if force:
        for name in (RESULTS, SUMMARY):
            (out / name).unlink(missing_ok=True)
    elif (out / RESULTS).exists() and (out / RESULTS).stat().st_size:
        _check_same_run(out, config)
    recorded = redact(config.model_dump(mode="json"), secrets(config))
    path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


def _check_same_run(out: Path, config: RunConfig) -> None:
    now = run_identity(config)
    path = out / CONFIG
    if path.exists():
        try:
            before = run_identity(RunConfig.model_validate(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            raise ConfigError(f"{path}: not a run config this version reads; pass --force to start over") from None
    else:  # rows without a config.json (written by hand, or by a version without one): judge by the rows
        rows = read_results(out, repair=False)
        if not rows:  # only a torn line: nothing to compare
            return
        before = {**now, **{k: rows[0].get(k) for k in ("agent", "task", "observation", "backend")}}
    changed = [key for key in now if before.get(key) != now[key]]
    if changed:
        what = ", ".join(f"{key}: {_short(before.get(key))} -> {_short(now[key])}" for key in changed)
        raise ConfigError(
            f"{out} holds a run with another config ({what}): pass --force to start it over, or choose another --out"
        )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def done_samples(out: Path, samples: int) -> set[str]:
    """The samples of ``out`` that need no new run: scored with ``samples`` predictions (a torn last line
    is dropped from the file, so that appends stay well-formed)."""
    return {r["sample_id"] for r in read_results(out, repair=True) if is_scored(r) and row_draws(r) == samples}


# -- the summary -----------------------------------------------------------------------------------------------


def summarize(rows: list[dict[str, Any]], config: RunConfig | None = None) -> dict[str, Any]:
    """Per-metric means over the scored samples (infrastructure failures out), with bootstrap intervals
    that resample whole trajectories (the samples of one trajectory are correlated).

    The metrics (:data:`~themisto_env.metrics.METRICS`, and for next-cell runs
    :data:`~themisto_env.metrics.API_SEQUENCE_METRICS`) and ``reward`` are those of each sample's first
    prediction. ``usage`` sums what the agent
    spent (:data:`USAGE_TOTALS`) over every row, scored or not, the rows of attempts run again on resume
    included (their tokens were paid for too); ``usage.tokens_reported`` is False when some model call
    reported no token counts (the totals are then lower bounds). When rows have ``draws`` (``samples=K``),
    :func:`themisto_env.scoring.passk.summarize_draws` adds ``draws`` (K), ``best_of_k`` and, with the execution
    score, ``pass_at_k`` (``{"1": {"mean", "ci_low", "ci_high"}, ..., "K": ...}``) and ``pass_at_k_counts``."""
    latest = {r["sample_id"]: r for r in rows}
    scored = [r for r in latest.values() if is_scored(r)]
    first = scored[0] if scored else next(iter(latest.values()), {})
    summary: dict[str, Any] = {
        "agent": config.agent if config else first.get("agent"),
        "model": first.get("model"),
        "task": config.task if config else first.get("task"),
        "observation": first.get("observation"),
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
        "usage": _usage_totals(rows),  # every attempt was paid for, the retried ones too
    }
    if scored:
        corpus = aggregate(
            [Score(**{m: r["scores"][m] for m in METRICS}) for r in scored],
            groups=[r["trajectory_id"] for r in scored],  # samples of a trajectory are correlated
        )
        for metric in METRICS:
            estimate = getattr(corpus, metric)
            summary[metric] = {"mean": estimate.mean, "ci_low": estimate.ci_low, "ci_high": estimate.ci_high}
        with_api = [r for r in scored if all(m in r["scores"] for m in API_SEQUENCE_METRICS)]
        if with_api:  # next-cell runs: JuICe's API-sequence metrics too
            columns = {m: [r["scores"][m] for r in with_api] for m in API_SEQUENCE_METRICS}
            estimates = estimate_means(columns, groups=[r["trajectory_id"] for r in with_api])
            summary.update({metric: asdict(estimate) for metric, estimate in estimates.items()})
        summary["reward"] = sum(r["reward"] for r in scored) / len(scored)
        summary.update(summarize_draws(scored, config.samples if config and config.samples > 1 else None))
    return summary


def _usage_totals(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    usages = [r["usage"] for r in rows if r.get("usage")]
    if not usages:
        return None
    totals: dict[str, Any] = {name: sum(int(u.get(name) or 0) for u in usages) for name in USAGE_TOTALS}
    totals["tokens_reported"] = all(u.get("tokens_reported", True) for u in usages)
    return totals


__all__ = [
    "CONFIG",
    "RESULTS",
    "SUMMARY",
    "ResultRow",
    "append_row",
    "done_samples",
    "is_scored",
    "model_label",
    "read_results",
    "redact",
    "row_draws",
    "run_label",
    "secrets",
    "summarize",
    "write_config",
]
