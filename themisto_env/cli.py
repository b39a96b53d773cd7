"""The ``themisto`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from themisto_env.errors import ConfigError, ThemistoError
from themisto_env.metrics import API_SEQUENCE_METRICS, METRICS
from themisto_env.run.results import model_label

app = typer.Typer(
    help="themisto-env: predict Jupyter development trajectories from runtime state.", no_args_is_help=True
)
data_app = typer.Typer(help="Build and inspect trajectory datasets.", no_args_is_help=True)
sandbox_app = typer.Typer(
    help="Kernel backends: build the image, check a backend, remove what dead processes left.", no_args_is_help=True
)
app.add_typer(data_app, name="data")
app.add_typer(sandbox_app, name="sandbox")
env_app = typer.Typer(
    help="Kernel environments: named package sets (a venv, an image) that datasets are replayed in.",
    no_args_is_help=True,
)
app.add_typer(env_app, name="env")
console = Console()

Backend = Annotated[str, typer.Option("--backend", "-b", help="Kernel backend: local, bwrap or docker.")]


def main() -> None:
    """Entry point: ThemistoErrors become a one-line message and exit code 1, never a traceback."""
    try:
        app()
    except ThemistoError as exc:  # one line, not wrapped, the message's brackets not read as markup
        message = " ".join(str(exc).split())
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
        raise SystemExit(1) from None


# -- sandbox ---------------------------------------------------------------------------------------------


@sandbox_app.command("build-image")
def sandbox_build_image(
    force: Annotated[bool, typer.Option(help="Rebuild even if the image exists.")] = False,
) -> None:
    """Build the kernel container image offline (debootstrap + wheels of the host's versions)."""
    from themisto_env.sandbox.image import build_image

    name = build_image(force=force)
    console.print(f"kernel image: [bold]{escape(name)}[/]")


@sandbox_app.command("check")
def sandbox_check(backend: Backend = "local") -> None:
    """Run the conformance suite on a backend and print a table; exit 1 if a check fails."""
    from themisto_env.sandbox.conformance import checks_for, run_check
    from themisto_env.sandbox.launcher import launcher_class

    cleaned = launcher_class(backend).cleanup_stale()
    if cleaned:
        console.print(f"removed {len(cleaned)} stale kernel(s) left by crashed processes: {escape(', '.join(cleaned))}")
    table = Table(title=f"sandbox check: {backend}")
    for column in ("check", "result", "seconds", "detail"):
        table.add_column(column)
    failed = 0
    with console.status(f"checking the {backend} backend...") as status:
        for check in checks_for(backend):
            status.update(escape(f"{check.name}: {check.description}"))
            result = run_check(check, backend)
            failed += not result.passed
            mark = "[green]pass[/]" if result.passed else "[red]FAIL[/]"
            table.add_row(escape(check.name), mark, f"{result.seconds:.1f}", escape(result.detail))
    console.print(table)
    if failed:
        raise typer.Exit(1)


@sandbox_app.command("gc")
def sandbox_gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be removed.")] = False,
    roots: Annotated[
        list[Path] | None,
        typer.Option("--root", help="Where run directories are (default: the temporary directory and /tmp)."),
    ] = None,
) -> None:
    """Remove what dead processes left: kernel run directories, kernel processes, containers.

    Kernels, run directories and containers of live processes are never touched.
    """
    from themisto_env.errors import BackendUnavailableError
    from themisto_env.sandbox import lifetime
    from themisto_env.sandbox.docker import remove_stale_containers

    lines = lifetime.collect(roots or None, dry_run=dry_run, containers=False)  # containers: all labelled ones, below
    docker_note = None
    try:
        verb = "would remove" if dry_run else "removed"
        lines += [f"{verb} container {name} (owner dead)" for name in remove_stale_containers(dry_run=dry_run)]
    except BackendUnavailableError as exc:
        docker_note = f"docker: not checked ({exc})"
    for line in lines:
        typer.echo(line)
    if docker_note:
        typer.echo(docker_note)
    items = sum(not line.startswith("warning:") for line in lines)
    typer.echo(f"{items} item(s) {'to remove' if dry_run else 'removed'}" + ("" if items else ": nothing left behind"))


# -- kernel environments ---------------------------------------------------------------------------------


@env_app.command("create")
def env_create(
    name: Annotated[str, typer.Argument(help="Name of the environment (moves to the new one if it exists).")],
    requirements: Annotated[
        Path | None, typer.Option("--requirements", "-r", help="A requirements file (pip syntax, packages only).")
    ] = None,
    apt: Annotated[list[str] | None, typer.Option("--apt", help="A Debian package to install (repeatable).")] = None,
    python: Annotated[str | None, typer.Option("--python", help="Python version X.Y (default: this one).")] = None,
    docker: Annotated[bool, typer.Option("--docker", help="Also build its image for the docker backend.")] = False,
) -> None:
    """Make a named kernel environment: a venv (local, bwrap) and with --docker an image, holding the
    requirements plus ipykernel and dill at versions compatible with them. Instant when it exists."""
    import time

    from themisto_env.replay import environments

    started = time.perf_counter()
    spec = environments.make_spec(requirements, apt=apt, python=python)
    record, cached = environments.create(name, spec, docker=docker, console=Console(stderr=True))
    how = "exists" if cached else f"built in {time.perf_counter() - started:.0f} s"
    console.print(
        f"environment [bold]{escape(name)}[/]: {record.id} ({how}); Python {record.python_version}, "
        f"{len(record.packages)} packages, {record.size_bytes / 1e6:.0f} MB"
        + (f"; image {escape(record.image)}" if record.image else "")
    )


@env_app.command("list")
def env_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The kernel environments on this machine (--json also names their docker images)."""
    from themisto_env.replay import environments

    if as_json:
        rows = [
            {"names": environments.names_of(r.id), **r.model_dump(exclude={"packages"}), "packages": len(r.packages)}
            for r in environments.list_environments()
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table()
    table.add_column("name", overflow="fold", min_width=10)
    for column in ("id", "python", "packages", "size", "created"):
        table.add_column(column, no_wrap=True)
    for record in environments.list_environments():
        table.add_row(
            escape("\n".join(environments.names_of(record.id)) or "-"),
            record.id,
            record.python_version,
            str(len(record.packages)),
            f"{record.size_bytes / 1e6:.0f} MB",
            record.created[:10],
        )
    console.print(table)


@env_app.command("rm")
def env_rm(
    name: Annotated[str, typer.Argument(help="Name (or id) of the environment.")],
    force: Annotated[bool, typer.Option("--force", help="Remove it even if a dataset built here uses it.")] = False,
) -> None:
    """Remove a kernel environment's name; the environment (venv and image) goes once no name points at it."""
    from themisto_env.replay import environments

    record = environments.remove(name, force=force)
    left = environments.names_of(record.id)
    console.print(
        f"removed {escape(name)}" + (f"; {record.id} kept for {escape(', '.join(left))}" if left else f" ({record.id})")
    )


# -- data --------------------------------------------------------------------------------------------------


@data_app.command("build")
def data_build(
    sources: Annotated[
        list[Path], typer.Argument(help="JuNE logs (.csv, .parquet, .jsonl), .ipynb files, or folders.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write (continued if it exists).")],
    backend: Backend = "local",
    snapshots: Annotated[bool, typer.Option(help="Snapshot the namespace after every step.")] = True,
    timeout: Annotated[float, typer.Option(help="Per-execution timeout in seconds.")] = 60.0,
    env: Annotated[
        str | None, typer.Option("--env", help="Kernel environment to replay in (`themisto env create`).")
    ] = None,
    requirements: Annotated[
        Path | None,
        typer.Option("--requirements", help="Replay in an environment of these requirements (made if missing)."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Folder the kernels run in a private copy of (default: each notebook's own folder; none for "
            "JuNE logs): where the session's files are."
        ),
    ] = None,
    workdir_limit_mb: Annotated[float, typer.Option(help="Largest working folder copied into a kernel (MB).")] = 100.0,
) -> None:
    """Replay sessions into trajectories with runtime state."""
    from themisto_env.replay.build import build_dataset
    from themisto_env.sandbox.models import SandboxLimits

    if env is not None and requirements is not None:
        raise ConfigError("give either --env or --requirements, not both")
    if requirements is not None:
        from themisto_env.replay import environments

        spec = environments.make_spec(requirements)
        env = environments.create(None, spec, console=Console(stderr=True))[0].id

    limits = SandboxLimits(timeout_s=timeout, workdir_mb=workdir_limit_mb)
    report = build_dataset(
        sources, out, backend=backend, snapshots=snapshots, limits=limits, workdir=workdir, environment=env
    )
    console.print(
        f"built {len(report.built)}, skipped {len(report.skipped)} already built, "
        f"failed {len(report.failed)}; {report.steps} steps in {report.seconds:.1f} s -> {out}",
        markup=False,
    )
    for tid, why in report.failed.items():
        console.print(f"[yellow]incomplete[/] {escape(f'{tid}: {why}')}")


@data_app.command("info")
def data_info(
    folder: Annotated[Path | None, typer.Argument(help="Dataset folder (default: the bundled data).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    backend: Backend = "local",
    raw: Annotated[bool, typer.Option("--raw", help="Also compare outputs without normalisation.")] = False,
    limit: Annotated[int, typer.Option(help="Disagreeing steps listed (all with --json).")] = 20,
) -> None:
    """Sessions, executions, samples per task, and replay agreement with its disagreements by kind."""
    from themisto_env.data.stats import dataset_info
    from themisto_env.replay.resolve import resolve_dataset

    info = dataset_info(resolve_dataset(folder, backend=backend), raw=raw)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    table = Table(title=escape(f"dataset {info['folder']}"))
    table.add_column("")
    table.add_column("value", justify="right")
    for key in ("trajectories", "complete", "executions", "errors", "restarts", "snapshot_mb"):
        table.add_row(key, str(info[key]))
    for task, n in info["samples"].items():
        dropped = info["samples_dropped_disagreeing"][task]
        table.add_row(f"samples: {task}", f"{n} ({dropped} dropped: replay disagrees)" if dropped else str(n))
    table.add_row("replay agreement", f"{share(info['agreement'])} of {info['compared']} compared")
    if raw:
        table.add_row("replay agreement, raw", share(info["raw_agreement"]))
    for kind, n in info["agreement_kinds"].items():
        table.add_row(f"  {kind}", str(n))
    console.print(table)
    rows = info["disagreements"]
    if rows:
        console.print("executions whose replayed output differs from the recorded one:")
        for row in rows[:limit]:
            console.print(f"  {row['trajectory']} step {row['step']} [{row['kind']}] {row['detail']}", markup=False)
        if len(rows) > limit:
            console.print(f"  ... {len(rows) - limit} more (--limit, or --json for all)", markup=False)


# -- experiments -----------------------------------------------------------------------------------------


@app.command("run")
def run_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Experiment config (YAML or JSON).")] = None,
    agent: Annotated[
        str | None,
        typer.Option(help="Agent: a name of `themisto agents`, or package.module:Class (a module here too)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="PROVIDER/NAME",
            help="The LLM agents' model: openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest, "
            "ollama/qwen2.5-coder:7b, fake, or package.module:ChatClass/NAME.",
        ),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", metavar="URL", help="The provider's endpoint (OpenAI-compatible).")
    ] = None,
    model_args: Annotated[
        list[str] | None,
        typer.Option(
            "--model-arg",
            "-M",
            metavar="KEY=VALUE",
            help="A model argument (repeatable): -M temperature=0 -M max_tokens=512.",
        ),
    ] = None,
    task: Annotated[str | None, typer.Option(help="next-cell or output.")] = None,
    observation: Annotated[
        str | None,
        typer.Option(help="What the agent sees: static, full or tools (default: the agent's own mode)."),
    ] = None,
    backend: Annotated[str | None, typer.Option("--backend", "-b", help="local, bwrap or docker.")] = None,
    data: Annotated[Path | None, typer.Option(help="Dataset folder (default: the bundled data).")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many samples.")] = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes (or Ray actors with --ray).")] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Spread episodes over Ray actors: 'local' starts a local Ray instance; 'auto' or a cluster "
            "address (HOST:6379, ray://HOST:10001) joins a running cluster. Needs themisto-env[ray].",
        ),
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            min=1,
            metavar="K",
            help="Predictions per sample (pass@k): the agent predicts each sample K times; the summary adds "
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
            metavar="FILE",
            help="SQLite cache of model replies (keyed by model, parameters and messages): a rerun is free.",
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder (resumed if it exists).")] = Path("runs/latest"),
    force: Annotated[
        bool, typer.Option("--force", help="Start the run folder over (its results are removed).")
    ] = False,
) -> None:
    """Run an agent over a task's samples; write results.jsonl and summary.json (resumable)."""
    from themisto_env.run.config import load_run_config, parse_model_args
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
        "limit": limit,
        "workers": workers,
        "ray": ray,
        "samples": samples,
        "max_retries": max_retries,
        "fail_on_error": fail_on_error,
    }
    overrides["data"] = str(data) if data is not None else None
    run_config = load_run_config(config, {k: v for k, v in overrides.items() if v is not None})
    if execution_score is not None:
        run_config = run_config.model_copy(update={"env": {**run_config.env, "execution_score": execution_score}})
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


def summary_table(summary: dict) -> Table:
    """A run summary as a table: each metric's mean and interval; with K predictions per sample, also
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

    for metric in (*METRICS, *API_SEQUENCE_METRICS):
        if metric in summary:
            add(metric, summary[metric])
    draws = summary.get("draws")
    for metric, m in summary.get("best_of_k", {}).items():
        add(f"best-of-{draws} {metric}", m)
    for k, m in summary.get("pass_at_k", {}).items():
        add(f"pass@{k}", m)
    return table


def usage_note(summary: dict) -> str | None:
    """One line on what the model calls of a run cost (None without model calls)."""
    usage = summary.get("usage") or {}
    if not usage.get("model_calls") and not usage.get("cached_calls"):
        return None
    note = f"{usage.get('model_calls', 0)} model calls, {usage.get('input_tokens', 0)} input and "
    note += f"{usage.get('output_tokens', 0)} output tokens"
    if usage.get("cached_calls"):
        note += f"; {usage['cached_calls']} replies from the cache"
    return note + ("" if usage.get("tokens_reported", True) else " (some calls reported no tokens: lower bounds)")


def draws_note(summary: dict) -> str | None:
    """One line on the K predictions per sample of a summary (None when it has one per sample)."""
    if "pass_at_k_counts" in summary:
        c = summary["pass_at_k_counts"]
        return (
            f"{summary['draws']} predictions per sample: {c['passed']} of {c['draws']} passed "
            f"({c['prediction_failures']} failed in their own code); exact_match, rouge_l, chrf: first predictions"
        )
    if summary.get("draws"):
        return f"{summary['draws']} predictions per sample; pass@k needs --execution-score (next-cell task)"
    return None


@app.command("agents")
def agents_command() -> None:
    """The agents `themisto run --agent` knows, a line each (built-in, registered and installed)."""
    from themisto_env.agents.registry import AGENTS, describe_agents

    described = describe_agents()
    width = max(len(name) for name, _, _ in described)
    for name, target, line in described:
        where = "" if name in AGENTS and target.startswith("themisto_env.") else f"  ({target})"
        typer.echo(f"{name:<{width}}  {line}{where}")
    typer.echo(f"{'':<{width}}  or --agent package.module:Class (a module in the current folder too)")


@app.command("compare")
def compare_command(
    run_a: Annotated[Path, typer.Argument(help="First run folder.")],
    run_b: Annotated[Path, typer.Argument(help="Second run folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Two runs on the same samples: paired differences with bootstrap intervals, and where each wins."""
    from themisto_env.run.compare import compare_runs

    result = compare_runs(run_a, run_b)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    table = Table(
        title=escape(
            f"A = {result['a']}  vs  B = {result['b']}  ({result['shared_samples']} shared samples in "
            f"{result['shared_trajectories']} trajectories, resampled whole)"
        )
    )
    for column in ("metric", "A", "B", "A - B", "95% CI", "A wins / ties / B wins"):
        table.add_column(column)
    for metric, d in result["metrics"].items():
        mark = "[bold]" if d["significant"] else ""
        table.add_row(
            metric,
            f"{d['mean_a']:.3f}",
            f"{d['mean_b']:.3f}",
            f"{mark}{d['mean_diff']:+.3f}",
            escape(f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"),
            f"{d['wins']} / {d['ties']} / {d['losses']}",
        )
    console.print(table)
    for side, key in (("A", "a_wins_most"), ("B", "b_wins_most")):
        for ex in result[key]:
            console.print(
                f"{side} wins most on {ex['sample_id']}: ROUGE-L {ex['rouge_l_a']:.2f} vs {ex['rouge_l_b']:.2f}",
                markup=False,
            )


@app.command("report")
def report_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders to put in one report.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="HTML file (default: RUN_DIR/report.html).")] = None,
) -> None:
    """An HTML report with plots: metrics by run, score along the trajectory, tool usage."""
    from themisto_env.run.report import write_report

    path = write_report(list(run_dirs), out)
    console.print(f"report: {path}", markup=False)


@app.command("view")
def view_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders to browse side by side.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="HTML file (default: RUN_DIR/view.html).")] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in the default browser.")] = False,
) -> None:
    """One HTML page to browse every sample: filters, the runs side by side, transcripts."""
    from themisto_env.run.view import write_view

    path = write_view(list(run_dirs), out)
    typer.echo(path)  # the path alone, unwrapped: `xdg-open $(themisto view RUN)`
    if open_page:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())


if __name__ == "__main__":  # pragma: no cover
    main()
