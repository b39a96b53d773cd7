"""``themisto run`` (an agent over a task's samples, and the summary it prints) and ``themisto agents``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from themisto_env import trace_export
from themisto_env.commands.common import KERNEL_PANEL, KernelOptions, ToolBudget, console, kernel_options
from themisto_env.metrics import API_SEQUENCE_METRICS, METRICS
from themisto_env.run.results import model_label
from themisto_env.run.tally import nothing_scored

MODEL_PANEL = "Model"
"""The help panel of the LLM agents' options (``--model``, ``-M``, ``--max-connections``, ...)."""


def run_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Experiment config (YAML or JSON).")] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            help="Agent: a name of `themisto agents`, package.module:Class (a module here too), or "
            "path/to/my_agents.py:Class."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="PROVIDER/NAME",
            rich_help_panel=MODEL_PANEL,
            help="The LLM agents' model: openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest, "
            "ollama/qwen2.5-coder:7b, fake, or package.module:ChatClass/NAME.",
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            metavar="URL",
            rich_help_panel=MODEL_PANEL,
            help="The provider's endpoint (OpenAI-compatible).",
        ),
    ] = None,
    model_args: Annotated[
        list[str] | None,
        typer.Option(
            "--model-arg",
            "-M",
            metavar="KEY=VALUE",
            rich_help_panel=MODEL_PANEL,
            help="A model argument (repeatable): -M temperature=0 -M max_tokens=512.",
        ),
    ] = None,
    task: Annotated[str | None, typer.Option(help="next-cell or output.")] = None,
    observation: Annotated[
        str | None,
        typer.Option(help="What the agent sees: static, full or tools (default: the agent's own mode)."),
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", "-b", rich_help_panel=KERNEL_PANEL, help="local, bwrap or docker.")
    ] = None,
    kernel: KernelOptions = None,
    data: Annotated[Path | None, typer.Option(help="Dataset folder (default: the bundled data).")] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            metavar="train|test|NAME:SIDE",
            help="Only one side of the dataset's split (`themisto data split`; by trajectory, test 0.2, seed 0 "
            "when none was written).",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="At most this many samples, spread over the trajectories by a seeded selection (the same as "
            "the inspect task's -T limit=N and the TRL export's limit).",
        ),
    ] = None,
    selection: Annotated[
        str | None,
        typer.Option(
            "--selection",
            metavar="spread|first",
            help="How --limit picks: spread (default; seeded by a config's selection_seed) or first.",
        ),
    ] = None,
    sample_ids: Annotated[
        Path | None,
        typer.Option(
            "--sample-ids",
            metavar="FILE",
            help="Run these samples: a file of sample ids, one a line, or another run's results.jsonl.",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=KERNEL_PANEL, help="Worker processes, each with its env and kernel (or Ray actors)."
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            rich_help_panel=KERNEL_PANEL,
            help="Spread episodes over Ray actors: 'local' starts a local Ray instance; 'auto' or a cluster "
            "address (HOST:6379, ray://HOST:10001) joins a running cluster. Needs themisto-env\\[ray].",
        ),
    ] = None,
    attempts: Annotated[
        int | None,
        typer.Option(
            "--attempts",
            min=1,
            metavar="K",
            help="Attempts per sample (pass@k): the agent predicts each sample K times; the summary adds "
            "pass@k over the execution score (with --execution-score) and best-of-K for the text metrics.",
        ),
    ] = None,
    execution_score: Annotated[
        bool | None,
        typer.Option(
            "--execution-score/--no-execution-score",
            help="Also score next-cell predictions by running them in disposable kernels (needed for pass@k; "
            "model-written code runs as you on the local backend: use --backend docker for untrusted models).",
        ),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option(
            "--max-retries",
            rich_help_panel=MODEL_PANEL,
            min=0,
            metavar="N",
            help="Retries of a failed model call (rate limit, 5xx, timeout), with exponential backoff and "
            "jitter, honouring Retry-After (LLM agents; default 5).",
        ),
    ] = None,
    fail_on_error: Annotated[
        float | None,
        typer.Option(
            "--fail-on-error",
            rich_help_panel=MODEL_PANEL,
            min=0.0,
            max=1.0,
            metavar="RATE",
            help="Stop the run when more than this fraction of the samples done failed in their model calls "
            "(judged after 10 samples, or all of a smaller run). Such samples are recorded as model_error and "
            "retried on resume.",
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(
            "--max-connections",
            rich_help_panel=MODEL_PANEL,
            min=1,
            metavar="N",
            help="Model calls in flight at once (LLM agents): episodes run concurrently, each with its own "
            "kernel, so a run waits on the model N times at once.",
        ),
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            rich_help_panel=MODEL_PANEL,
            metavar="FILE",
            help="SQLite cache of model replies (keyed by model, parameters and messages): a rerun is free.",
        ),
    ] = None,
    tool_budget: ToolBudget = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder (resumed if it exists).")] = Path("runs/latest"),
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            metavar="FILE",
            help="Write the run's OpenTelemetry spans to FILE, one JSON object a line (e.g. runs/latest/"
            "trace.jsonl; appended). Needs themisto-env\\[trace]. OTEL_EXPORTER_OTLP_ENDPOINT sends them to a "
            "collector too.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Start the run folder over (its results are removed).")
    ] = False,
) -> None:
    """Run an agent over a task's samples; write results.jsonl and summary.json (resumable).

    Rarer options (the env's tool cost, history length, reward weights and sample rule; the selection's
    seed) go in a config file (--config)."""
    from themisto_env.run.config import check_env_options, load_run_config, parse_model_args
    from themisto_env.run.runner import run

    overrides = {
        "agent": agent,
        "model": model,
        "base_url": base_url,
        "model_args": parse_model_args(model_args or []) or None,
        "observation": observation,
        "max_connections": max_connections,
        "cache": str(cache) if cache is not None else None,
        "task": task,
        "backend": backend,
        "split": split,
        "limit": limit,
        "selection": selection,
        "sample_ids": str(sample_ids) if sample_ids is not None else None,
        "workers": workers,
        "ray": ray,
        "attempts": attempts,
        "max_retries": max_retries,
        "fail_on_error": fail_on_error,
    }
    overrides["data"] = str(data) if data is not None else None
    run_config = load_run_config(config, {k: v for k, v in overrides.items() if v is not None})
    given: dict[str, object] = {} if tool_budget is None else {"tool_budget": tool_budget}
    if execution_score is not None:
        given["execution_score"] = execution_score
    if kernel:  # over the config's kernel: block
        given["kernel"] = {**run_config.env.get("kernel", {}), **kernel_options(kernel)}
    if given:  # over the config's env: block
        run_config = run_config.model_copy(update={"env": {**run_config.env, **given}})
        check_env_options(run_config.env, config)
    with trace_export.configured(trace):  # and the OTEL_* variables
        summary = run(run_config, out, force=force)
    console.print(summary_table(summary))
    for note in (draws_note(summary), usage_note(summary)):
        if note:
            console.print(note, markup=False)
    if summary["infrastructure_failures"]:
        console.print(
            f"[yellow]{summary['infrastructure_failures']} samples hit an infrastructure failure "
            "(not scored; run again to retry them)[/]"
        )
    if summary.get("model_errors"):
        console.print(
            f"[yellow]{summary['model_errors']} samples failed in their model calls "
            "(not scored; see model_error in results.jsonl; run again to retry them)[/]"
        )
    if summary.get("state_mismatches"):
        console.print(
            f"[yellow]{summary['state_mismatches']} samples could not be served in their recorded state "
            "(not scored; see state_mismatch in results.jsonl)[/]"
        )
    console.print(f"results: {out / 'results.jsonl'}", markup=False)
    failure = nothing_scored(summary)
    if failure:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(failure)}")
        raise typer.Exit(1)


def summary_table(summary: dict) -> Table:
    """A run summary as a table: each metric's mean and interval; with K attempts per sample, also
    pass@k (execution score) and best-of-K (text metrics)."""
    model = model_label(summary.get("model"))
    agent = f"{summary['agent']} {model}" if model else summary["agent"]
    table = Table(
        title=escape(f"{agent} on {summary['task']} ({summary['observation']}), {summary['samples']} samples")
    )
    for column in ("metric", "mean", "95% CI"):
        table.add_column(column)

    def add(name: str, m: dict) -> None:
        table.add_row(escape(name), f"{m['mean']:.3f}", escape(f"[{m['ci_low']:.3f}, {m['ci_high']:.3f}]"))

    for metric in METRICS:
        if metric in summary:
            add(metric, summary[metric])
    api_over = f" ({summary.get('api_samples')} of {summary['samples']})" if "api_samples" in summary else ""
    for metric in API_SEQUENCE_METRICS:
        if metric in summary:
            add(metric + api_over, summary[metric])
    draws = summary.get("draws")
    for metric, m in summary.get("best_of_k", {}).items():
        add(f"best-of-{draws} {metric}", m)
    for k, m in summary.get("pass_at_k", {}).items():
        add(f"pass@{k}", m)
    for figure, m in summary.get("per_sample", {}).items():  # reward, tool calls, tokens per sample
        add(f"{figure.replace('_', ' ')} / sample", m)
    return table


def usage_note(summary: dict) -> str | None:
    """One line on what the model calls of a run cost (None without model calls)."""
    usage = summary.get("usage") or {}
    if not usage.get("model_calls") and not usage.get("cached_calls") and not usage.get("retries"):
        return None
    note = f"{usage.get('model_calls', 0)} model calls, {usage.get('input_tokens', 0)} input and "
    note += f"{usage.get('output_tokens', 0)} output tokens"
    if usage.get("cached_calls"):
        note += f"; {usage['cached_calls']} replies from the cache"
    if usage.get("retries"):
        limited = f", {usage['rate_limited']} after a rate limit (429)" if usage.get("rate_limited") else ""
        note += f"; {usage['retries']} calls retried{limited}"
    return note + ("" if usage.get("tokens_reported", True) else " (some calls reported no tokens: lower bounds)")


def draws_note(summary: dict) -> str | None:
    """One line on the K attempts per sample of a summary (None when it has one per sample)."""
    if "pass_at_k_counts" in summary:
        c = summary["pass_at_k_counts"]
        return (
            f"{summary['draws']} attempts per sample: {c['passed']} of {c['draws']} passed "
            f"({c['prediction_failures']} failed in their own code); exact_match, rouge_l, chrf: first predictions"
        )
    if summary.get("draws"):
        return f"{summary['draws']} attempts per sample; pass@k needs --execution-score (next-cell task)"
    return None


def agents_command() -> None:
    """The agents `themisto run --agent` knows, a line each (built-in, registered and installed)."""
    from themisto_env.agents.registry import AGENTS, NEEDS_MODEL, describe_agents

    described = describe_agents()
    width = max(len(name) for name, _, _ in described)
    for name, target, line in described:
        where = "" if name in AGENTS and target.startswith("themisto_env.") else f"  ({target})"
        typer.echo(f"{name:<{width}}  {line}{where}")
    typer.echo(f"{'':<{width}}  or --agent package.module:Class (a module in the current folder too)")
    typer.echo(f"{'':<{width}}  or --agent path/to/my_agents.py:Class (a file anywhere)")
    if any(line.startswith(NEEDS_MODEL) for _, _, line in described):
        typer.echo(
            f"{NEEDS_MODEL}: give --model PROVIDER/NAME (openai/gpt-4o-mini, ...), or --model fake for an offline "
            "dry run (docs/first-llm-evaluation.md)"
        )


__all__ = ["MODEL_PANEL", "agents_command", "draws_note", "run_command", "summary_table", "usage_note"]
