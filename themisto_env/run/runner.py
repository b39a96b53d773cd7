"""Running an agent over a dataset: [`run`][themisto_env.run.run], the one entry point (``themisto run``).

Each sample becomes one [`ResultRow`][themisto_env.run.ResultRow] of ``OUT/results.jsonl``, appended as soon as
it is scored, and ``OUT/summary.json`` is written at the end. Run again on the same folder, it skips the
samples already scored and retries those with an infrastructure failure or a model error (docs/agents.md).
The parts: `plan` (which samples remain), `rollout` (the episode loop), `rows`, `executors` (``serial``,
``processes``, ``concurrent``, ``ray``), `tally` (counts, when to stop), `results` and `summary`.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from themisto_env.data.writes import write_text_atomic
from themisto_env.env.config import env_config_and_dataset
from themisto_env.errors import ConfigError, ModelError
from themisto_env.redaction import redact
from themisto_env.replay.resolve import dataset_kernel_environment
from themisto_env.run.config import RunConfig
from themisto_env.run.executors import executor_for
from themisto_env.run.plan import plan_run
from themisto_env.run.results import RESULTS, SUMMARY, append_row, done_samples, read_results, secrets, write_config
from themisto_env.run.rollout import env_options, make_run_agent
from themisto_env.run.summary import summarize
from themisto_env.run.tally import RunProgress


def run(config: RunConfig, out: str | Path, *, progress: bool = True, force: bool = False) -> dict[str, Any]:
    """Run (or resume) an experiment into ``out``; return the summary (also written to summary.json).

    A resumed run skips the samples already scored (a torn last line is dropped) and runs again those
    whose row has ``infrastructure_error`` or ``model_error`` set (model calls that still failed after
    their retries: neither scored nor an infrastructure failure). With ``attempts=K`` a sample's row,
    written once all K predictions are scored, adds ``draws`` and the summary pass@k.

    Raises:
        ConfigError: ``out`` holds a run with another config (``force`` starts it over).
        ModelError: ``fail_on_error`` was exceeded, during the run or over all its rows at the end (the
            rows so far and the summary are written).
    """
    out = Path(out)
    agent = make_run_agent(config)  # a config that cannot run fails here, before anything in out is touched
    # The samples come from the dataset (resolved, and if needed built, here); only the executors make envs.
    env_config, dataset = env_config_and_dataset(env_options(config, agent))
    # Its kernels can start (else one line saying how to make its kernel environment):
    dataset_kernel_environment(dataset.path, env_config.kernel.environment, backend=env_config.backend)
    samples = dataset.samples(env_config.task, env_config.sample_rule)
    if not samples:
        raise ConfigError(f"no {env_config.task} samples in {dataset.path} under {env_config.sample_rule}")
    out.mkdir(parents=True, exist_ok=True)
    write_config(out, config, force=force)
    done = done_samples(out, config.attempts)  # other rows (failed, fewer predictions) are run again
    plan = plan_run(samples, dataset.episodes(env_config.task, env_config.sample_rule), config, done)
    if config.data is None and config.ray is None:  # Ray nodes resolve the bundled data themselves
        config = config.model_copy(update={"data": str(dataset.path)})
    hidden = secrets(config)
    with RunProgress(config, plan, show=progress) as books, open(out / RESULTS, "a", encoding="utf-8") as f:
        rows = executor_for(config)(config, plan.episodes)
        try:
            for row in rows:
                append_row(f, row, hidden)
                if books.record(row):
                    break
        finally:
            if hasattr(rows, "close"):  # ends the episodes, workers or actors now, not when collected
                with contextlib.suppress(Exception):
                    rows.close()
    summary = summarize(read_results(out), config)
    write_text_atomic(out / SUMMARY, json.dumps(summary, indent=2) + "\n")
    if books.finish():
        raise ModelError(redact(books.stop or "", hidden))
    return summary


__all__ = ["run"]
