"""A run folder's records: the result row, reading and appending ``results.jsonl``, the run's config.

A run folder (``themisto run --out DIR``) holds ``config.json`` (the [`RunConfig`][themisto_env.run.RunConfig],
secrets redacted), ``results.jsonl`` (one [`ResultRow`][themisto_env.run.ResultRow] per sample) and
``summary.json``. Every reader (summary, resume, report, view, compare) reads rows through
[`read_results`][themisto_env.run.read_results]. No secret is written: `secrets` collects the run's keys and
[`redact`][themisto_env.redaction.redact] replaces them in every row and the config.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.data.writes import append_line, naming, write_text_atomic
from themisto_env.errors import ConfigError, DataError
from themisto_env.redaction import environment_secrets, redact, secret_values
from themisto_env.run.config import RunConfig

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.json"


class Draw(BaseModel):
    """One prediction of a sample run with ``attempts=K``, as kept in its row's ``draws``.

    Attributes:
        prediction: The predicted text.
        scores: Its metrics (for next-cell, with the API sequence's).
        reward: Its ``SampleScore.reward`` (docs/reward.md; None when the sample is unscored).
        execution_score: Its execution score (next-cell with ``execution_score``), else None.
        passed: Whether its execution passed (None without an execution score); a prediction whose own code
            failed never passes.
        prediction_failed: Why its own code failed, if it did.
        tool_calls: The env's record of its tool calls.
        usage: What the agent spent on it.
        transcript: Its conversation (None for agents without one).
    """

    model_config = ConfigDict(extra="allow")

    prediction: str
    scores: dict[str, float]
    reward: float | None
    execution_score: float | None = None
    passed: bool | None = None
    prediction_failed: str | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] | None = None


TIMING_KINDS = ("state", "tools", "model", "scoring")
"""Where a sample's time goes (a row's ``timing``): serving its state, answering its tools, the agent (its
model calls), scoring its predictions."""


class Timing(BaseModel):
    """Where a sample's time went, in seconds (a row's ``timing``): each kind's own time, a kind's work
    inside another's counted once, for the inner kind.

    Attributes:
        state: Serving the sample's state (restores, forks, replays, checks), whenever it was served: as
            the sample before it was scored, at its first tool call, for its execution score.
        tools: Answering its tool calls (less serving the state they needed).
        model: The agent deciding (its model calls, retries and waits among them).
        scoring: Scoring its predictions (metrics, the execution score's run, less its state).
    """

    model_config = ConfigDict(extra="allow")

    state: float = 0.0
    tools: float = 0.0
    model: float = 0.0
    scoring: float = 0.0

    @property
    def total(self) -> float:
        """The seconds of the four kinds together."""
        return self.state + self.tools + self.model + self.scoring


class ResultRow(BaseModel):
    """One sample of a run, as written to ``results.jsonl`` (fields unknown here are kept as they are).

    Attributes:
        sample_id, trajectory_id, step, task: The sample.
        agent, observation, backend: How it was run.
        model: ``{"provider", "name", "params"}`` of an LLM agent's model (None for other agents).
        prediction, target: The (first) prediction and the reference.
        scores: The metrics of [`METRICS`][themisto_env.metrics.METRICS] (and, for next-cell, the API
            sequence's), each in [0, 1].
        reward: The (first) prediction's ``SampleScore.reward`` (docs/reward.md: the metrics, the
            execution score when on, minus ``tool_cost`` per tool call); None when the sample is unscored
            (``infrastructure_error`` or ``state_mismatch``).
        execution_score: The execution score (next-cell with ``execution_score``), else None.
        tool_calls: The env's record of the tool calls (``{"tool", "args", "ok"}``).
        forced_submission: The tool budget ran out and the env submitted for the agent.
        usage: What the agent spent (model calls, tokens, tool calls), over all its predictions.
        transcript: The conversation of the (first) prediction: ``{"role", "content", "tool_calls"?,
            "tool_call_id"?}`` messages (None for agents without one).
        seconds: Wall time of the sample.
        timing: Where its time went (`Timing`: state, tools, model, scoring); None in rows of older runs.
        started_at, finished_at: ISO-8601 UTC times of the sample's start and end.
        infrastructure_error, state_mismatch, recovered, state_check: What the env reports of the state.
        state_served_by: How copies of the sample's state were made (``fork``: forked from the state's
            template; ``restore``: a snapshot loaded into a started kernel, or into a forked copy where the
            template makes no state templates; see the env's ``fork``).
        prediction_failed: Why the prediction's own code failed (execution score), if it did.
        model_error: Why the model calls failed after their retries (the sample is run again on resume).
        draws: With ``attempts=K``, each prediction as a `Draw` (its own transcript included); None
            (and no ``draws`` key in the dict form) for a row of one prediction.
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
    reward: float | None
    execution_score: float | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    forced_submission: bool = False
    usage: dict[str, Any] | None = None
    transcript: list[dict[str, Any]] | None = None
    seconds: float
    timing: Timing | None = None
    started_at: str | None = None
    finished_at: str | None = None
    infrastructure_error: str | None = None
    state_mismatch: str | None = None
    recovered: list[Any] | None = None
    state_check: str | None = None
    state_served_by: str | None = None
    prediction_failed: str | None = None
    model_error: str | None = None
    draws: list[Draw] | None = None

    @property
    def is_scored(self) -> bool:
        """Whether the row counts: not an infrastructure failure, not served in a mismatched state, no failed
        model call. Rows that do not count are left out of the summary and run again on resume."""
        return not self.infrastructure_error and not self.state_mismatch and not self.model_error

    @property
    def draw_count(self) -> int:
        """How many predictions the row holds (1 for a row without ``draws``)."""
        return len(self.draws or ()) or 1

    @property
    def label(self) -> str:
        """``agent model (observation)``: how a run is named in compare, report and view."""
        model = model_label(self.model)
        return f"{self.agent}{f' {model}' if model else ''} ({self.observation})"

    def to_dict(self) -> dict[str, Any]:
        """The row's dict form, as ``results.jsonl`` holds it: the fields it was made or read with (a row
        of one prediction has no ``draws`` key), in field order, then any fields unknown here."""
        return self.model_dump(mode="json", exclude_unset=True)


def read_results(out: str | Path, *, repair: bool = False) -> list[ResultRow]:
    """The rows of a run folder. A torn last line (a killed writer, or a row being written now) is left out;
    with ``repair`` (the runner, before appending) it is also dropped from the file.

    Raises:
        DataError: A line that is not JSON (other than a torn last one), or not a result row (named by
            file, line and field).
    """
    path = Path(out) / RESULTS
    if not path.exists():
        return []
    rows: list[ResultRow] = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        try:
            data = json.loads(line)
        except RecursionError:  # nested thousands deep: no row the runner wrote
            raise DataError("a JSON line nested too deep to be a result row", path=path, row=number) from None
        except json.JSONDecodeError:
            if number == len(lines):  # torn by a kill: drop it so appends stay well-formed
                if repair:
                    path.write_text("".join(lines[:-1]), encoding="utf-8")
                break
            raise DataError("not a JSON line", path=path, row=number) from None
        try:
            rows.append(ResultRow.model_validate(data))
        except ValidationError as exc:
            raise DataError(
                f"not a result row: {exc.errors()[0]['msg']}", path=path, row=number, field=_field(exc)
            ) from None
    if repair and len(rows) == len(lines) and lines and not lines[-1].endswith("\n"):
        with naming(path), open(path, "a", encoding="utf-8") as handle:  # a whole row, its newline unwritten
            handle.write("\n")
    return rows


def make_result_row(fields: dict[str, Any]) -> ResultRow:
    """A new row from its fields (the runner's).

    Raises:
        ConfigError: A field of the wrong shape: the agent's transcript or model record, the only fields
            that come from outside the runner (the message names the field and the agent).
    """
    try:
        return ResultRow.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(
            f"the row of {fields.get('sample_id')} is not a result row (field {_field(exc)!r}: "
            f"{exc.errors()[0]['msg']}): check what agent {fields.get('agent')!r} gives as transcript and "
            "model_record()"
        ) from None


def _field(exc: ValidationError) -> str:
    """The dotted path of a validation error's first field (``row`` for the row as a whole)."""
    return ".".join(map(str, exc.errors()[0]["loc"])) or "row"


def append_row(file: IO[str], row: ResultRow, secrets: Iterable[str] = ()) -> None:
    """Write one row's dict form (secrets redacted) as a line of ``results.jsonl``, and flush it."""
    append_line(file, json.dumps(redact(row.to_dict(), secrets)))  # whole or not at all (a full disk)


def model_label(model: dict[str, Any] | None) -> str | None:
    """``provider/name`` of a model record (a row's or a summary's ``model``), or None."""
    if not isinstance(model, dict) or not model.get("provider"):
        return None
    return "/".join(str(part) for part in (model["provider"], model.get("name")) if part)


# -- secrets -------------------------------------------------------------------------------------------------


def secrets(config: RunConfig | None = None) -> set[str]:
    """The secret values a run must never write ([`themisto_env.redaction`][themisto_env.redaction]): those of its
    options (``agent_options``, ``model_args``, the endpoint's URL) and of secret-like environment variables."""
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


def _results_env(env: dict[str, Any]) -> dict[str, Any]:
    """The env options that change a run's results: without `OPERATIONAL_ENV`, flat or in the ``kernel:``
    block."""
    kept = {k: v for k, v in env.items() if k not in OPERATIONAL_ENV}
    if isinstance(kept.get("kernel"), dict):
        kept["kernel"] = {k: v for k, v in kept["kernel"].items() if k not in OPERATIONAL_ENV}
    return kept


def run_identity(config: RunConfig) -> dict[str, Any]:
    """What makes a run's rows comparable: the agent and its model options (as the agent gets them, secrets
    redacted, without `OPERATIONAL_OPTIONS`), the task, the observation mode the env will use, the
    backend, the data and the env options (without `OPERATIONAL_ENV`). Resuming a run folder with
    another identity is refused. ``limit``, ``workers``, ``ray``, ``max_retries``, ``fail_on_error``,
    ``max_connections``, ``cache`` and ``samples`` may change (a sample with another number of predictions
    is run again anyway)."""
    from themisto_env.agents.registry import agent_observation

    kwargs = {k: v for k, v in config.agent_kwargs().items() if k not in OPERATIONAL_OPTIONS}
    identity = {
        "agent": config.agent,
        "agent_options": kwargs,
        "task": config.task,
        "observation": config.observation or agent_observation(config.agent) or "static",
        "backend": config.backend,
        "data": recorded_data(config),
        "env": _results_env(config.env),
    }
    if config.split is not None:  # only then: run folders from before splits keep their identity
        identity["split"] = config.split
    return redact(identity, secrets(config))


def recorded_data(config: RunConfig) -> str:
    """The data a run reads, as its config.json records it: ``config.data``, or for the bundled data (None or
    ``bundled``) its resolved folder, whose name carries the bundled log's digest, the backend and the kernel
    package set (the folder a resume must read again to continue the same run; ``themisto view`` reads it).
    A config.json of an older version, with ``data: null``, compares equal to it."""
    from themisto_env.replay.dataset import BUNDLED
    from themisto_env.replay.resolve import bundled_dataset_dir

    if config.data is None or config.data == BUNDLED:
        return str(bundled_dataset_dir(config.backend))
    return config.data


def write_config(out: Path, config: RunConfig, *, force: bool = False) -> None:
    """Record the run's config in ``out`` (redacted), after checking that it resumes the same run.

    Raises:
        ConfigError: ``out`` holds rows of a run of another `run_identity` (read from its config.json,
            or from its rows when it has none), unless ``force``: then its results and summary are removed.
    """
    path = out / CONFIG
    if force:
        for name in (RESULTS, SUMMARY):
            (out / name).unlink(missing_ok=True)
    elif (out / RESULTS).exists() and (out / RESULTS).stat().st_size:
        _check_same_run(out, config)
    recorded = redact({**config.model_dump(mode="json"), "data": recorded_data(config)}, secrets(config))
    write_text_atomic(path, json.dumps(recorded, indent=2) + "\n")


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
        before = {**now, **{k: getattr(rows[0], k) for k in ("agent", "task", "observation", "backend")}}
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
    return {r.sample_id for r in read_results(out, repair=True) if r.is_scored and r.draw_count == samples}


__all__ = [
    "CONFIG",
    "RESULTS",
    "SUMMARY",
    "TIMING_KINDS",
    "Draw",
    "ResultRow",
    "Timing",
    "append_row",
    "done_samples",
    "make_result_row",
    "model_label",
    "read_results",
    "recorded_data",
    "run_identity",
    "secrets",
    "write_config",
]
