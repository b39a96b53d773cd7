"""A grid of runs, agents × tasks × observation modes, as one command (``themisto eval-set``).

Each setting of the grid is one ordinary run folder under the eval-set's folder (``OUT/<task>-<observation>-
<agent>``), run by [`run`][themisto_env.run.run]: a setting resumes as a run resumes, and a setting whose folder
is complete (its ``eval-set-done.json`` names the same config and the results it summarised are unchanged) is
skipped. Settings run in parallel, each in a process of its own, at most ``max_runs`` at once (default
`default_max_runs`: the machine's cores, capped). The grid's table (`grid_rows`) is written to
``OUT/eval-set.json``, one row per setting; `themisto_env.run.evalset_report` writes its HTML report.

An eval-set config is pure data (`EvalSetConfig`): the lists ``agent``, ``task`` and ``observation`` (each also
a comma-separated string; an agent written ``llm-{observation}`` is a family, one agent per mode), ``max_runs``,
and any other key of a run config, shared by every setting.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from themisto_env.data.samples import TaskName
from themisto_env.data.writes import write_text_atomic
from themisto_env.errors import ConfigError, ThemistoError
from themisto_env.metrics import METRICS
from themisto_env.run.config import ObservationName, RunConfig, check_env_options, read_config_file
from themisto_env.run.results import RESULTS, SUMMARY

GRID = "eval-set.json"
"""The grid's table, in the eval-set's folder."""
DONE = "eval-set-done.json"
"""In a setting's folder: the config it completed with and the size of the results it summarised."""
MAX_RUNS_CAP = 4
"""`default_max_runs` never exceeds this (each run holds a kernel, and more on LLM agents' connections)."""


def default_max_runs() -> int:
    """Settings run at once by default: the machine's cores, at least 1 and at most `MAX_RUNS_CAP`."""
    return max(1, min(os.cpu_count() or 1, MAX_RUNS_CAP))


def _listed(value: Any) -> Any:
    """``"a,b"`` -> ``["a", "b"]``; a list's items split likewise; anything else as it is."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple):
        return [part.strip() for item in value for part in str(item).split(",") if part.strip()]
    return value


class EvalSetConfig(BaseModel):
    """The grid: every agent × task × observation mode, each setting one run sharing the other options.

    Attributes:
        agent: The agents (names of ``themisto agents``, or ``package.module:Class``).
        task: The tasks (``next-cell``, ``output``).
        observation: The observation modes (``static``, ``full``, ``tools``).
        max_runs: Settings run at once (None: `default_max_runs`).
        run: Every other run option (``data``, ``limit``, ``backend``, ``model``, ``env``, ...), as a run
            config takes it; extra keys of the config file land here.
    """

    model_config = ConfigDict(extra="forbid")

    agent: list[str] = Field(default_factory=lambda: ["runtime-state"], min_length=1)
    task: list[TaskName] = Field(default_factory=lambda: ["next-cell", "output"], min_length=1)
    observation: list[ObservationName] = Field(default_factory=lambda: ["static", "full", "tools"], min_length=1)
    max_runs: int | None = Field(None, ge=1)
    run: dict[str, Any] = Field(default_factory=dict)

    @field_validator("agent", "task", "observation", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return _listed(value)

    def settings(self) -> list[Setting]:
        """The grid's settings, tasks outermost, then agents, then observation modes in the order given. An
        agent written with ``{observation}`` is a family: ``llm-{observation}`` is ``llm-static`` in static
        mode, ``llm-full`` in full mode, ``llm-tools`` in tools mode."""
        return [
            Setting(a.replace("{observation}", o), t, o, family=a)
            for t in dict.fromkeys(self.task)
            for a in self.agent
            for o in self.observation
        ]

    def run_config(self, setting: Setting) -> RunConfig:
        """The run config of one setting.

        Raises:
            ConfigError: An invalid shared option (named).
        """
        config = RunConfig(
            **{**self.run, "agent": setting.agent, "task": setting.task, "observation": setting.observation}
        )
        check_env_options(config.env, "eval-set")
        return config


@dataclass(frozen=True)
class Setting:
    """One cell of the grid: an agent on a task in an observation mode (``family``: the agent as the grid
    names it, the same for the modes of one family)."""

    agent: str
    task: str
    observation: str
    family: str = ""

    @property
    def folder(self) -> str:
        """The setting's run folder's name: ``<task>-<observation>-<agent>`` (the agent made file-safe)."""
        agent = re.sub(r"[^A-Za-z0-9._-]+", "_", self.agent.rsplit("/", 1)[-1]).strip("_") or "agent"
        return f"{self.task}-{self.observation}-{agent}"


_GRID_KEYS = ("agent", "task", "observation", "max_runs")


def load_eval_set_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> EvalSetConfig:
    """Read an eval-set config (YAML or JSON; or the defaults) and apply command-line overrides: the grid's
    keys (`_GRID_KEYS`) set the grid, every other key is a shared run option.

    Raises:
        ConfigError: The file is unreadable, or a key or value is invalid (named in the message).
    """
    merged = {**read_config_file(path), **(overrides or {})}
    grid = {k: merged.pop(k) for k in _GRID_KEYS if k in merged}
    try:
        config = EvalSetConfig(**grid, run=merged)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path or 'options'}: {problems}") from None
    for setting in config.settings():  # every setting's config is valid before anything runs
        config.run_config(setting)
    return config


# -- running the grid ------------------------------------------------------------------------------------------


def is_complete(folder: Path, config: RunConfig) -> bool:
    """Whether a setting's folder holds the finished run of ``config``: its `DONE` record names the same
    config and the results.jsonl it summarised is unchanged (a run killed or resumed since is not)."""
    try:
        done = json.loads((folder / DONE).read_text(encoding="utf-8"))
        size = (folder / RESULTS).stat().st_size
    except (OSError, ValueError):
        return False
    return done.get("config") == config.model_dump(mode="json") and done.get("results_bytes") == size


def run_setting(config_json: str, folder: str) -> dict[str, Any]:
    """Run one setting into its folder (in a worker process) and record it complete; return its summary.

    A setting whose rows are not all scored (infrastructure failures, model errors) is not recorded
    complete: the next eval-set runs it again, as ``themisto run`` would resume it.
    """
    from themisto_env.run.runner import run

    config = RunConfig.model_validate_json(config_json)
    out = Path(folder)
    summary = run(config, out, progress=False)
    if not summary.get("infrastructure_failures") and not summary.get("model_errors"):
        record = {"config": config.model_dump(mode="json"), "results_bytes": (out / RESULTS).stat().st_size}
        write_text_atomic(out / DONE, json.dumps(record, indent=2) + "\n")
    return summary


@dataclass
class SettingOutcome:
    """What became of one setting: ``skipped`` (complete before), ``ran``, or ``failed`` with the error."""

    setting: Setting
    folder: Path
    status: str
    error: str | None = None


def run_grid(
    config: EvalSetConfig,
    out: str | Path,
    *,
    on_done: Callable[[SettingOutcome], None] | None = None,
) -> list[SettingOutcome]:
    """Run every setting of the grid not complete yet into ``out``, at most ``max_runs`` at once.

    The dataset is opened (for the bundled data: replayed into the cache) once here, before the settings
    start. A setting that fails (a config its agent refuses, too many model errors) is reported and the
    others go on.

    Args:
        config: The grid.
        out: The eval-set's folder.
        on_done: Called with each setting's outcome as it ends (in the order they end).

    Returns:
        The outcomes in the grid's order.
    """
    from themisto_env.replay.dataset import Dataset

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    first = config.run_config(config.settings()[0])
    Dataset.open(first.data, backend=first.backend, progress=True)  # build the bundled data once, not per process
    outcomes: dict[Setting, SettingOutcome] = {}
    pending: list[tuple[Setting, RunConfig]] = []
    for setting in config.settings():
        run_config = config.run_config(setting)
        if is_complete(out / setting.folder, run_config):
            outcomes[setting] = SettingOutcome(setting, out / setting.folder, "skipped")
            if on_done:
                on_done(outcomes[setting])
        else:
            pending.append((setting, run_config))
    for outcome in _run_pending(pending, out, config.max_runs or default_max_runs()):
        outcomes[outcome.setting] = outcome
        if on_done:
            on_done(outcome)
    return [outcomes[s] for s in config.settings()]


def _run_pending(pending: list[tuple[Setting, RunConfig]], out: Path, max_runs: int) -> Iterator[SettingOutcome]:
    """Run the pending settings in worker processes (spawned: no kernel or thread is inherited)."""
    if not pending:
        return
    with ProcessPoolExecutor(max_workers=min(max_runs, len(pending)), mp_context=mp.get_context("spawn")) as pool:
        futures: dict[Future[dict[str, Any]], Setting] = {
            pool.submit(run_setting, c.model_dump_json(), str(out / s.folder)): s for s, c in pending
        }
        remaining = set(futures)
        while remaining:
            finished, remaining = wait(remaining, return_when=FIRST_COMPLETED)
            for future in finished:
                setting = futures[future]
                try:
                    future.result()
                except ThemistoError as exc:
                    yield SettingOutcome(setting, out / setting.folder, "failed", " ".join(str(exc).split()))
                else:
                    yield SettingOutcome(setting, out / setting.folder, "ran")


# -- the grid's table ------------------------------------------------------------------------------------------


def grid_rows(outcomes: list[SettingOutcome], out: str | Path) -> list[dict[str, Any]]:
    """One row per setting, from its run folder's summary.json: agent, task, observation, the run folder (from
    ``out``), samples, each metric's and per-sample figure's mean and interval (``reward``, ``tool_calls``,
    ``tokens``), and the setting's status (and error)."""
    rows = []
    for outcome in outcomes:
        setting = outcome.setting
        row: dict[str, Any] = {
            "agent": setting.agent,
            "family": setting.family or setting.agent,
            "task": setting.task,
            "observation": setting.observation,
            "run": os.path.relpath(outcome.folder, out),
            "status": outcome.status,
        }
        if outcome.error:
            row["error"] = outcome.error
        summary_path = outcome.folder / SUMMARY
        summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() else {}
        row["samples"] = summary.get("samples", 0)
        if summary.get("model"):
            row["model"] = summary["model"]
        for metric in METRICS:
            row[metric] = summary.get(metric)
        per_sample = summary.get("per_sample") or {}
        for figure in ("reward", "tool_calls", "tokens"):
            row[figure] = per_sample.get(figure)
        rows.append(row)
    return rows


def write_grid(rows: list[dict[str, Any]], out: str | Path, config: EvalSetConfig) -> Path:
    """Write ``OUT/eval-set.json``: the grid's config and its rows; return its path."""
    path = Path(out) / GRID
    document = {"grid": config.model_dump(mode="json", exclude={"run"}), "run": config.run, "rows": rows}
    write_text_atomic(path, json.dumps(document, indent=2) + "\n")
    return path


__all__ = [
    "DONE",
    "GRID",
    "MAX_RUNS_CAP",
    "EvalSetConfig",
    "Setting",
    "SettingOutcome",
    "default_max_runs",
    "grid_rows",
    "is_complete",
    "load_eval_set_config",
    "run_grid",
    "run_setting",
    "write_grid",
]
