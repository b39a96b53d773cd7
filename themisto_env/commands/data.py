"""``themisto data``: build trajectory datasets and describe them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from themisto_env import trace_export
from themisto_env.commands.common import Backend, console
from themisto_env.errors import ConfigError

if TYPE_CHECKING:
    from themisto_env.build.builder import BuildReport
    from themisto_env.sandbox.models import SandboxLimits

data_app = typer.Typer(help="Build and inspect trajectory datasets.", no_args_is_help=True)
"""``themisto data``."""


@data_app.command("build")
def data_build(
    sources: Annotated[
        list[Path], typer.Argument(help="JuNE logs (.csv, .parquet, .jsonl), .ipynb files, or folders.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to write (continued if it exists).")],
    backend: Backend = "local",
    snapshots: Annotated[bool, typer.Option(help="Snapshot the namespace after every step.")] = True,
    min_cell_timeout: Annotated[
        float,
        typer.Option(
            "--min-cell-timeout",
            help="The least time a cell with a recorded duration gets (it gets 5x its recorded time if more), in s.",
        ),
    ] = 60.0,
    helper_timeout: Annotated[
        float,
        typer.Option(
            "--helper-timeout",
            help="How long one call of the in-kernel helper (a snapshot, a state check) may take, in s.",
        ),
    ] = 60.0,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            help="Deprecated: sets both --min-cell-timeout and --helper-timeout, as it did before they were split.",
        ),
    ] = None,
    cell_timeout: Annotated[
        float | None,
        typer.Option(
            "--cell-timeout",
            help="One limit for every cell, in seconds (default: 5x its recorded time, at least --min-cell-timeout; "
            "600 s where no time was recorded, as in a saved notebook).",
        ),
    ] = None,
    kernel_env: Annotated[
        str | None, typer.Option("--kernel-env", help="Kernel environment to replay in (`themisto kernel-env create`).")
    ] = None,
    requirements: Annotated[
        Path | None,
        typer.Option("--requirements", help="Replay in a kernel environment of these requirements (made if missing)."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Folder the kernels run in a private copy of (default: each notebook's own folder; none for "
            "JuNE logs): where the session's files are."
        ),
    ] = None,
    workdir_limit_mb: Annotated[float, typer.Option(help="Largest working folder copied into a kernel (MB).")] = 100.0,
    workers: Annotated[
        int, typer.Option(help="Sessions replayed at once, each in its own kernel (Ray actors with --ray).")
    ] = 1,
    project_envs: Annotated[
        bool,
        typer.Option(
            "--project-envs",
            help="SOURCE is a folder of projects: each notebook in the kernel environment its project asks for "
            "(requirements.txt, environment.yml or pyproject.toml next to it or above, else its imports), one "
            "dataset per environment under --out, and folder-build.json.",
        ),
    ] = False,
    installer: Annotated[
        str, typer.Option(help="What makes kernel environments: pip, or uv (faster; `pip install uv`).")
    ] = "pip",
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Replay on Ray actors: 'local' starts a private Ray instance, 'auto' or an address (HOST:6379, "
            "ray://HOST:10001) joins a running cluster, where the dataset folder must be at the same path on every "
            "node. Needs themisto-env\\[ray].",
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace",
            metavar="FILE",
            help="Write the build's OpenTelemetry spans (sessions, cells) to FILE, one JSON object a line. "
            "Needs themisto-env\\[trace].",
        ),
    ] = None,
) -> None:
    """Replay sessions into trajectories with runtime state.

    A build killed midway keeps the sessions it finished: the same command again replays the rest.
    """
    from themisto_env.build.builder import build_dataset
    from themisto_env.sandbox.models import SandboxLimits

    if kernel_env is not None and requirements is not None:
        raise ConfigError("give either --kernel-env or --requirements, not both")
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give 1 or more (how many sessions to replay at once)")
    if installer not in ("pip", "uv"):
        raise ConfigError(f"--installer {installer}: give pip or uv")
    if timeout is not None:  # the one option of old, for both limits: kept working, and said so
        print(
            "themisto data build: --timeout is deprecated; it sets both --min-cell-timeout and --helper-timeout "
            f"({timeout:g} s): give those instead",
            file=sys.stderr,
        )
        min_cell_timeout = helper_timeout = timeout
    for name, value in (("--min-cell-timeout", min_cell_timeout), ("--helper-timeout", helper_timeout)):
        if value <= 0:
            raise ConfigError(f"{name} {value:g}: give a number of seconds above 0")
    if project_envs:
        if len(sources) != 1 or not sources[0].is_dir() or kernel_env is not None or requirements is not None:
            raise ConfigError("--project-envs takes one folder, and no --kernel-env or --requirements")
        limits = SandboxLimits(timeout_s=helper_timeout, workdir_mb=workdir_limit_mb)
        build_projects(sources[0], out, backend, snapshots, limits, min_cell_timeout, workers, ray, installer)
        return
    if requirements is not None:
        from themisto_env.sandbox.environments import manage
        from themisto_env.sandbox.environments.environment_spec import make_spec

        spec = make_spec(requirements)
        kernel_env = manage.create(None, spec, console=Console(stderr=True))[0].id

    limits = SandboxLimits(timeout_s=helper_timeout, workdir_mb=workdir_limit_mb)
    with trace_export.configured(trace):  # and the OTEL_* variables
        report = build_dataset(
            sources,
            out,
            backend=backend,
            snapshots=snapshots,
            limits=limits,
            workdir=workdir,
            environment=kernel_env,
            workers=workers,
            ray=ray,
            cell_timeout=cell_timeout,
            min_cell_timeout=min_cell_timeout,
        )
    console.print(
        f"built {len(report.built)}, skipped {len(report.skipped)} already built, "
        f"failed {len(report.failed)}; {report.steps} steps in {report.seconds:.1f} s -> {out}",
        markup=False,
    )
    for tid, why in report.retried.items():
        console.print(f"[yellow]replayed again[/] {escape(f'{tid}: {why}')}")
    for tid, why in report.failed.items():
        console.print(f"[yellow]incomplete[/] {escape(f'{tid}: {why}')}")
    if report.cut:
        where = "; ".join(f"{tid} step {', '.join(map(str, steps))}" for tid, steps in report.cut.items())
        longer = max(2 * report.longest_limit_s, 600.0)
        console.print(
            f"[yellow]cut[/] {sum(map(len, report.cut.values()))} cells ran past their limit and were cut "
            f"({escape(where)}); rebuild with a longer limit: themisto data build ... --cell-timeout {longer:g}",
            soft_wrap=True,
        )
    print_source_counts(report, out, workers)


def build_projects(
    folder: Path,
    out: Path,
    backend: str,
    snapshots: bool,
    limits: SandboxLimits,
    min_cell_timeout: float,
    workers: int,
    ray: str | None,
    installer: str,
) -> None:
    """``themisto data build FOLDER --project-envs``: build, then a row per notebook."""
    from themisto_env.build.folder_build import REPORT, build_folder

    def say(line: str) -> None:
        console.print(escape(line), soft_wrap=True)

    report = build_folder(
        folder,
        out,
        backend=backend,
        snapshots=snapshots,
        limits=limits,
        min_cell_timeout=min_cell_timeout,
        workers=workers,
        ray=ray,
        installer=installer,  # type: ignore[arg-type]
        say=say,
    )
    table = Table(title=escape(f"{len(report.notebooks)} notebooks under {folder}"))
    for column in ("notebook", "environment", "packages from", "status", "agreement", "causes"):
        table.add_column(column)
    for row in report.notebooks:
        causes = ", ".join(f"{k} {v}" for k, v in sorted(row.causes.items(), key=lambda kv: -kv[1]) if k != "ok")
        agreement = "n/a" if row.agreement is None else f"{row.agreement:.0%}"
        status = row.status if row.reason is None else f"{row.status}: {row.reason}"
        table.add_row(
            *(escape(str(x)) for x in (row.notebook, row.environment, row.packages_from, status, agreement, causes))
        )
    console.print(table)
    built = sum(n.status == "built" for n in report.notebooks)
    console.print(
        f"{built} of {len(report.notebooks)} notebooks built in {len(report.environments)} environment(s); "
        f"{report.executions} executions in {report.build_seconds} s of replay ({report.seconds} s in all); "
        f"datasets under {out}/<environment>, report {out / REPORT}",
        markup=False,
        soft_wrap=True,
    )


def print_source_counts(report: BuildReport, out: Path, workers: int = 1) -> None:
    """The sources a build could not read (it went on without them), what the sample rule kept of the
    dataset and why it dropped the others (in total and per notebook), and where the replay's time went."""
    from themisto_env.commands.data_corpus import print_build_samples, print_build_timing
    from themisto_env.data.corpus import corpus_table
    from themisto_env.data.trajectory import iter_trajectories

    for path, why in report.bad_sources.items():
        where = "" if why.startswith(path) else f"{path}: "
        console.print(f"[yellow]not read[/] {escape(where + why)}", soft_wrap=True)
    trajectories = list(iter_trajectories(out))
    print_build_samples(corpus_table(trajectories).to_json(), str(out))
    print_build_timing(report.timing(trajectories), workers)


@data_app.command("info")
def data_info(
    folder: Annotated[Path | None, typer.Argument(help="Dataset folder (default: the bundled data).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    backend: Backend = "local",
    raw: Annotated[bool, typer.Option("--raw", help="Also compare outputs without normalisation.")] = False,
    limit: Annotated[int, typer.Option(help="Disagreeing steps listed (all with --json).")] = 20,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", metavar="FILE", help="Also draw kept and dropped samples per notebook (.png or .svg)."),
    ] = None,
) -> None:
    """Sessions, executions, samples per task (per notebook, with drops by cause), and replay agreement with
    its disagreements by kind."""
    from themisto_env.commands.data_corpus import print_corpus
    from themisto_env.data.kind_and_size import LEVEL_WORDS
    from themisto_env.data.stats import dataset_info
    from themisto_env.replay.dataset import Dataset
    from themisto_env.replay.resolve import resolve_dataset

    path = resolve_dataset(folder, backend=backend)
    info = dataset_info(path, raw=raw)
    info["splits"] = Dataset.open(path).split_report()
    if plot is not None:
        from themisto_env.data.corpus_plot import write_corpus_plot

        write_corpus_plot(info["corpus"], plot)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return

    def share(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1%}"

    table = Table(title=escape(f"dataset {info['folder']}"))
    table.add_column("")
    table.add_column("value", justify="right")
    for key in (
        "trajectories",
        "complete",
        "executions",
        "errors",
        "restarts",
        "snapshot_mb",
        "files_mb",
        "figures_kept",
    ):
        table.add_row(key, str(info[key]))
    for task, n in info["samples"].items():
        dropped = info["samples_dropped_disagreeing"][task]
        table.add_row(f"samples: {task}", f"{n} ({dropped} dropped: replay disagrees)" if dropped else str(n))
    table.add_row("replay agreement", f"{share(info['agreement'])} of {info['compared']} compared")
    levels = ", ".join(f"{LEVEL_WORDS[level]} {n}" for level, n in info["recorded_levels"].items())
    table.add_row("  judged at (what was recorded)", levels or "-")
    if raw:
        table.add_row("replay agreement, raw", share(info["raw_agreement"]))
    split = info["agreement_split"]
    table.add_row(
        "  agrees / tolerated / disagrees",
        f"{share(split['agrees'])} / {share(split['tolerated'])} / {share(split['disagrees'])}",
    )
    for kind, n in info["agreement_kinds"].items():
        table.add_row(f"  {kind}", str(n))
    environment = info["kernel_environment"]
    shown = f"{environment['name'] or environment['id']} (Python {environment['python']})" if environment else None
    table.add_row("kernel environment", escape(shown or "the tool's own Python"))
    for folder, digest in info["working_folders"].items():
        table.add_row("working folder", escape(f"{folder} ({digest[:12]})"))
    console.print(table)
    print_corpus(info["corpus"], "samples per notebook (kept, and dropped by cause)")
    print_kinds_by_source(info["kinds_by_source"])
    print_splits(info["splits"])
    rows = info["disagreements"]
    if rows:
        console.print("executions whose replayed output differs from the recorded one:")
        for row in rows[:limit]:
            console.print(f"  {row['trajectory']} step {row['step']} [{row['kind']}] {row['detail']}", markup=False)
        if len(rows) > limit:
            console.print(f"  ... {len(rows) - limit} more (--limit, or --json for all)", markup=False)
    if plot is not None:
        console.print(f"plot: {plot}", markup=False, soft_wrap=True)


def print_kinds_by_source(by_source: dict[str, dict[str, int]]) -> None:
    """The agreement kinds per source file: a row per source, its steps that agree and the causes of the
    others with their counts (``data info``)."""
    from themisto_env.data.agreement import TOLERATED

    if not by_source:
        return
    table = Table(title="replay agreement by cause, per source")
    table.add_column("source")
    table.add_column("steps", justify="right")
    table.add_column("agree", justify="right")
    table.add_column("causes of the others (tolerated: timing, warning)")
    for source, counts in by_source.items():
        causes = ", ".join(
            f"{kind}{' (tolerated)' if kind in TOLERATED else ''} {n}" for kind, n in counts.items() if kind != "ok"
        )
        table.add_row(escape(Path(source).name or source), str(sum(counts.values())), str(counts.get("ok", 0)), causes)
    console.print(table)


def print_splits(splits: dict[str, dict[str, Any]]) -> None:
    """The named splits as they hold now: rule, sides, leakage (``data info``, ``data split``)."""
    for name, split in splits.items():
        rule = split["rule"]
        written = "" if split.get("written", True) else " (not written: the default rule)"
        trajectories = split["trajectories"]
        samples = "; ".join(f"{task} {c['train']} / {c['test']}" for task, c in split["samples"].items())
        console.print(
            f"split {name}{written}: by {rule['by']}, test {rule['test_size']:g}, seed {rule['seed']}: "
            f"trajectories {trajectories['train']} train / {trajectories['test']} test; samples {samples}",
            markup=False,
            soft_wrap=True,
        )
        leak = split["leakage"]
        verbatim = "; ".join(
            f"{task} {n} of {leak['test_samples'].get(task, 0)}" for task, n in leak["verbatim_test_targets"].items()
        )
        console.print(
            f"  leakage: trajectories on both sides {leak['trajectories_on_both_sides']}, groups on both sides "
            f"{leak['groups_on_both_sides']}; test targets verbatim in train: {verbatim}",
            markup=False,
            soft_wrap=True,
        )


@data_app.command("split")
def data_split(
    folder: Annotated[
        Path | None, typer.Argument(help="Dataset folder (default: the bundled data, in the cache).")
    ] = None,
    test: Annotated[float, typer.Option("--test", help="Expected share of groups on the test side.")] = 0.2,
    by: Annotated[str, typer.Option("--by", help="What stays on one side: trajectory, user or notebook.")] = (
        "trajectory"
    ),
    seed: Annotated[int, typer.Option(help="Another seed draws another split.")] = 0,
    name: Annotated[
        str, typer.Option(help="The split's name (`--split test` is `default:test`; `--split NAME:test`).")
    ] = "default",
    backend: Backend = "local",
) -> None:
    """Split a dataset into train and test (hash-based: a trajectory keeps its side when the data grows),
    check for leakage, and keep the split beside the dataset (splits.json)."""
    from themisto_env.data.splits import SplitRule
    from themisto_env.replay.dataset import Dataset

    if by not in ("trajectory", "user", "notebook"):
        raise ConfigError(f"--by {by}: give trajectory, user or notebook")
    if not 0 < test < 1:
        raise ConfigError(f"--test {test}: give a share between 0 and 1 (e.g. 0.2)")
    dataset = Dataset.open(folder, backend=backend)
    record = dataset.save_split(SplitRule(by=by, test_size=test, seed=seed), name)  # type: ignore[arg-type]
    print_splits({name: record.model_dump()})
    console.print(f"written to {dataset.path / 'splits.json'}", markup=False, soft_wrap=True)


@data_app.command("export")
def data_export(
    folder: Annotated[
        Path | None, typer.Argument(help="Dataset folder (default: the bundled data, in the cache).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="A new folder to write.")] = Path("export"),
    split: Annotated[
        str,
        typer.Option(help="The named split the sample tables follow (default: the written one, or the default rule)."),
    ] = "default",
    snapshot_dir: Annotated[
        Path | None, typer.Option(help="The snapshot store the dataset was built with (default: the cache's).")
    ] = None,
    snapshots: Annotated[
        bool, typer.Option(help="Copy the snapshots (without: states are replayed from cells).")
    ] = True,
    backend: Backend = "local",
) -> None:
    """Write a dataset to share: Parquet tables (pandas, Hugging Face datasets), a dataset card (README.md),
    and the files and snapshots that let `Dataset.open(OUT)` serve its states. Nothing is uploaded."""
    from themisto_env.replay.dataset import Dataset
    from themisto_env.replay.dataset_export import export_dataset_folder

    dataset = Dataset.open(folder, backend=backend)
    report = export_dataset_folder(dataset, out, split=split, snapshot_dir=snapshot_dir, snapshots=snapshots)
    samples = "; ".join(f"{task} {c['train']} train / {c['test']} test" for task, c in report.samples.items())
    console.print(
        f"exported {report.trajectories} trajectories, {report.steps} executions, samples {samples}, "
        f"{report.snapshots} snapshots ({report.missing_snapshots} missing), {report.megabytes} MB -> {out}",
        markup=False,
        soft_wrap=True,
    )
    console.print(f"dataset card: {out / 'README.md'} (how to publish it is at its end)", markup=False, soft_wrap=True)


__all__ = ["data_app"]
