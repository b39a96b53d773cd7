"""A run folder's records: the result row, reading and appending ``results.jsonl``, the summary.

A run folder (``themisto run --out DIR``) holds:

``config.json``
    The :class:`~themisto_env.config.RunConfig` (secrets redacted).
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
import os
import re
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.config import RESULT_FIELDS, RunConfig
from themisto_env.errors import ConfigError, DataError
from themisto_env.metrics import API_SEQUENCE_METRICS, METRICS, Score, aggregate, estimate_means
from themisto_env.passk import summarize_draws

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.json"
REDACTED = "[REDACTED]"
SECRET_NAME = re.compile(r"(api_?key|secret|token|password|authorization|credential)", re.IGNORECASE)
"""Option names whose values are secrets (and never written)."""
SECRET_VARIABLES = re.compile(r"^[A-Z0-9_]*(API_KEY|_TOKEN|_SECRET)$")
"""Environment variables whose values are secrets wherever they appear."""
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


def read_results(out: str | Path) -> list[dict[str, Any]]:
    """The rows of a run folder (as dicts); a torn last line (a killed writer) is dropped from the file.

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
    ResultRow.model_validate(row)
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
    """The secret values a run must never write: options named like keys, and the providers' key variables."""
    found = {value for name, value in os.environ.items() if SECRET_VARIABLES.match(name) and len(value) >= 8}
    if config is not None:
        found |= _secret_values(config.agent_options) | _secret_values(config.model_args)
        if config.base_url and (userinfo := re.match(r"^[a-z+]+://([^/@]+)@", config.base_url)):
            found.add(userinfo.group(1))
    return {s for s in found if s}


def _secret_values(options: Any) -> set[str]:
    if isinstance(options, dict):
        found: set[str] = set()
        for name, value in options.items():
            if SECRET_NAME.search(str(name)) and isinstance(value, str):
                found.add(value)
            else:
                found |= _secret_values(value)
        return found
    if isinstance(options, list):
        return set().union(*(_secret_values(v) for v in options)) if options else set()
    return set()


def redact(value: Any, secret_values: Iterable[str]) -> Any:
    """``value`` with every secret replaced by ``[REDACTED]``: in any string, at any depth, and the whole
    value of any option named like a key."""
    ordered = sorted(set(secret_values), key=len, reverse=True)

    def clean(item: Any, name: str = "") -> Any:
        if isinstance(item, str):
            if name and SECRET_NAME.search(name) and item:
                return REDACTED
            for secret in ordered:
                item = item.replace(secret, REDACTED)
            return item
        if isinstance(item, dict):
            return {k: clean(v, str(k)) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        return item

    return clean(value)


# -- the run folder --------------------------------------------------------------------------------------------


def write_config(out: Path, config: RunConfig, *, force: bool = False) -> None:
    """Record the run's config in ``out`` (redacted), after checking that it resumes the same run.

    Raises:
        ConfigError: ``out`` holds rows of a run with other values of :data:`~themisto_env.config.RESULT_FIELDS`
            (and ``force`` is not set). With ``force`` the folder's results and summary are removed first.
    """
    path = out / CONFIG
    recorded = redact(config.model_dump(mode="json"), secrets(config))
    if force:
        for name in (RESULTS, SUMMARY):
            (out / name).unlink(missing_ok=True)
    elif path.exists() and (out / RESULTS).exists() and (out / RESULTS).stat().st_size:
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ConfigError(f"{path}: unreadable; pass --force to start the run over") from None
        changed = [f for f in RESULT_FIELDS if before.get(f, RunConfig.model_fields[f].default) != recorded[f]]
        if changed:
            what = ", ".join(f"{f}: {_short(before.get(f))} -> {_short(recorded[f])}" for f in changed)
            raise ConfigError(
                f"{out} holds a run with another config ({what}): pass --force to start it over, or choose "
                "another --out"
            )
    path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def done_samples(out: Path, samples: int) -> set[str]:
    """The samples of ``out`` that need no new run: scored with ``samples`` predictions."""
    return {r["sample_id"] for r in read_results(out) if is_scored(r) and row_draws(r) == samples}


# -- the summary -----------------------------------------------------------------------------------------------


def summarize(rows: list[dict[str, Any]], config: RunConfig | None = None) -> dict[str, Any]:
    """Per-metric means over the scored samples (infrastructure failures out), with bootstrap intervals
    that resample whole trajectories (the samples of one trajectory are correlated).

    The metrics (:data:`~themisto_env.metrics.METRICS`, and for next-cell runs
    :data:`~themisto_env.metrics.API_SEQUENCE_METRICS`) and ``reward`` are those of each sample's first
    prediction. ``usage`` sums what the agent
    spent (:data:`USAGE_TOTALS`) over every sample, scored or not (a failed sample's tokens were paid
    for too); ``usage.tokens_reported`` is False when some model call reported no token counts (the
    totals are then lower bounds). When rows have ``draws`` (``samples=K``),
    :func:`themisto_env.passk.summarize_draws` adds ``draws`` (K), ``best_of_k`` and, with the execution
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
        "usage": _usage_totals(latest.values()),
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
