"""A folder of notebooks built at scale, each notebook in the kernel environment its project asks for.

``themisto data build FOLDER --out DIR --project-envs`` (`build_folder`) finds every notebook under
``FOLDER``, gives each the package set its project asks for (`project_packages`), makes one kernel
environment per distinct set, and builds each environment's notebooks into a dataset of their own,
``DIR/<environment>/`` (a dataset records one kernel environment). ``DIR/folder-build.json`` lists per
notebook its environment, where its packages came from, its agreement, or why it could not be built; a
notebook that cannot be built does not stop the others. Usage is in docs/data.md.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from themisto_env.build.project_packages import ProjectPackages, project_packages
from themisto_env.data.samples import step_cause
from themisto_env.data.trajectory import iter_trajectories
from themisto_env.data.writes import write_text_atomic
from themisto_env.errors import ConfigError, ThemistoError
from themisto_env.sandbox.environments.venv import Installer
from themisto_env.sandbox.models import SandboxLimits

__all__ = ["REPORT", "FolderBuildReport", "NotebookBuild", "build_folder", "find_notebooks"]

REPORT = "folder-build.json"
DEFAULT_LABEL = "default"
"""The dataset (and environment) of notebooks that need no package beyond the standard library."""


@dataclass
class NotebookBuild:
    """One notebook of a folder build.

    Attributes:
        notebook: Its path, relative to the folder.
        environment: The dataset it went into (``env-<id>``, or ``default`` for the tool's own Python).
        environment_id: The kernel environment's id (None: the tool's own Python).
        packages: Its package set.
        packages_from: Where the set came from: a project file's path, or ``imports`` (with the mapping).
        status: ``built``, ``incomplete`` (its replay stopped: the trajectory's failure), or ``failed``.
        reason: Why it is not ``built``.
        trajectories: The trajectories it gave.
        executions: Executions replayed.
        agreement: Share of its executions with recorded outputs whose replay agrees (None: none recorded).
        causes: Its executions by agreement kind (``ok``, ``display``, ``missing-module``, ...).
    """

    notebook: str
    environment: str | None = None
    environment_id: str | None = None
    packages: list[str] = field(default_factory=list)
    packages_from: str = ""
    status: str = "failed"
    reason: str | None = None
    trajectories: list[str] = field(default_factory=list)
    executions: int = 0
    agreement: float | None = None
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class FolderBuildReport:
    """What a folder build did.

    Attributes:
        folder: The folder built.
        out: Where the datasets are (one per environment).
        notebooks: Per notebook, in path order.
        environments: Per environment label: its id, packages, notebooks, whether it existed, seconds to
            make it, or the error that kept it from being made.
        seconds: Wall time.
        build_seconds: Time spent replaying (environments not counted).
        executions: Executions replayed.
    """

    folder: str
    out: str
    notebooks: list[NotebookBuild] = field(default_factory=list)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    build_seconds: float = 0.0
    executions: int = 0

    def to_json(self) -> str:
        """The report as ``folder-build.json`` holds it."""
        return json.dumps(asdict(self), indent=2) + "\n"


def find_notebooks(folder: str | Path) -> list[Path]:
    """Every notebook under ``folder`` in path order (checkpoints and hidden folders skipped)."""
    root = Path(folder)
    return sorted(
        p
        for p in root.rglob("*.ipynb")
        if not any(part.startswith(".") for part in p.relative_to(root).parts[:-1]) and p.is_file()
    )


def build_folder(
    folder: str | Path,
    out: str | Path,
    *,
    backend: str = "local",
    snapshots: bool = True,
    limits: SandboxLimits | None = None,
    min_cell_timeout: float | None = None,
    snapshot_dir: str | Path | None = None,
    workers: int = 1,
    ray: str | None = None,
    installer: Installer = "pip",
    progress: bool = True,
    say: Callable[[str], None] | None = None,
) -> FolderBuildReport:
    """Build every notebook under ``folder``, each in its project's kernel environment (module docstring).

    Args:
        folder: The folder of notebooks.
        out: Where the datasets go (``out/<environment>/``) and ``folder-build.json``.
        backend: The sandbox backend.
        snapshots: Snapshot the namespace after every step.
        limits: Sandbox limits (``timeout_s``: the helper-call limit, as in
            `themisto_env.build.builder.build_dataset`).
        min_cell_timeout: The least a cell with a recorded time is given (as in
            `themisto_env.build.builder.build_dataset`).
        snapshot_dir: The snapshot store (None: the cache's).
        workers: Notebooks replayed at once (per environment), each in its own kernel.
        ray: Replay on Ray actors (as ``themisto data build --ray``).
        installer: ``pip`` or ``uv`` for making environments.
        progress: Show each build's progress on stderr.
        say: Where one-line news goes (an environment being made, a notebook that failed); None: nowhere.

    Returns:
        The report (also written to ``out/folder-build.json``).

    Raises:
        ConfigError: ``folder`` is not a folder or holds no notebook.
    """
    from themisto_env.sandbox.environments import manage
    from themisto_env.sandbox.environments.environment_spec import make_spec

    started = time.perf_counter()
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a folder of notebooks")
    notebooks = find_notebooks(root)
    if not notebooks:
        raise ConfigError(f"{root}: no notebook (.ipynb) under it")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = FolderBuildReport(folder=str(root), out=str(out))
    news = say or (lambda _line: None)

    # the package set of each notebook, grouped
    groups: dict[tuple[str, ...], list[tuple[NotebookBuild, ProjectPackages]]] = {}
    for path in notebooks:
        asked = project_packages(path, root)
        entry = NotebookBuild(
            notebook=str(path.relative_to(root)),
            packages=list(asked.requirements),
            packages_from=asked.origin if asked.origin != "imports" else f"imports: {asked.detail}",
        )
        report.notebooks.append(entry)
        if asked.error is not None:
            entry.reason = asked.error
            news(f"not built: {entry.notebook}: {asked.error}")
            continue
        groups.setdefault(asked.requirements, []).append((entry, asked))

    # one environment per package set, then one build per environment
    for requirements, members in groups.items():
        label, env_id = DEFAULT_LABEL, None
        info: dict[str, Any] = {"packages": list(requirements), "notebooks": [e.notebook for e, _ in members]}
        if requirements:
            spec = make_spec("\n".join(requirements))
            label = f"env-{spec.id}"
            news(f"kernel environment {label}: {', '.join(requirements)} ({len(members)} notebook(s))")
            made = time.perf_counter()
            try:
                record, cached = manage.create(None, spec, installer=installer)
            except ThemistoError as exc:
                info["error"] = " ".join(str(exc).split())
                report.environments[label] = {"id": spec.id, **info}
                for entry, _ in members:
                    entry.environment, entry.environment_id = label, spec.id
                    entry.reason = f"its packages do not install: {info['error']}"
                    news(f"not built: {entry.notebook}: {entry.reason}")
                continue
            env_id = record.id
            info.update(cached=cached, seconds=round(time.perf_counter() - made, 1), installer=installer)
        report.environments[label] = {"id": env_id, **info}
        for entry, _ in members:
            entry.environment, entry.environment_id = label, env_id

        options = {
            "backend": backend,
            "snapshots": snapshots,
            "limits": limits,
            "min_cell_timeout": min_cell_timeout,
            "snapshot_dir": snapshot_dir,
            "progress": progress,
            "environment": env_id,
            "workers": workers,
            "ray": ray,
        }
        _build_batch(members, out / label, options, report, news)
    report.executions = sum(n.executions for n in report.notebooks)
    report.build_seconds = round(report.build_seconds, 1)
    report.seconds = round(time.perf_counter() - started, 1)
    write_text_atomic(out / REPORT, report.to_json())
    return report


def _build_batch(
    batch: list[tuple[NotebookBuild, ProjectPackages]],
    dataset: Path,
    options: dict[str, Any],
    report: FolderBuildReport,
    news: Callable[[str], None],
) -> None:
    """Build notebooks of one environment into ``dataset``; a build that stops (one notebook's first
    session failed before anything was written) is made again notebook by notebook, so that it stops only
    the notebook that stopped it."""
    from themisto_env.build.builder import build_dataset

    building = time.perf_counter()
    try:
        built = build_dataset([str(asked.notebook) for _, asked in batch], dataset, **options)
    except ThemistoError as exc:
        report.build_seconds += time.perf_counter() - building
        if len(batch) > 1:
            for member in batch:
                _build_batch([member], dataset, options, report, news)
            return
        entry = batch[0][0]
        entry.reason = f"the build stopped: {' '.join(str(exc).split())}"
        news(f"not built: {entry.notebook}: {entry.reason}")
        return
    report.build_seconds += time.perf_counter() - building
    _record(batch, built, dataset, news)


def _record(members: list[tuple[NotebookBuild, ProjectPackages]], built: Any, dataset: Path, news: Callable) -> None:
    """Fill each notebook's entry from its build: trajectories, agreement, causes, status."""
    by_path = {str(Path(path).resolve()): ids for path, ids in built.sources.items()}
    trajectories = {t.id: t for t in iter_trajectories(dataset)} if dataset.exists() else {}
    for entry, asked in members:
        path = str(asked.notebook.resolve())
        bad = next((why for source, why in built.bad_sources.items() if str(Path(source).resolve()) == path), None)
        if bad is not None:
            entry.reason = f"cannot be read: {bad}"
            news(f"not built: {entry.notebook}: {entry.reason}")
            continue
        entry.trajectories = list(by_path.get(path, []))
        mine = [trajectories[t] for t in entry.trajectories if t in trajectories]
        steps = [s for t in mine for s in t.steps]
        entry.executions = len(steps)
        entry.causes = dict(Counter(step_cause(s) for s in steps))
        compared = [s for s in steps if s.agreement_kind != "unrecorded"]
        entry.agreement = round(sum(s.agrees for s in compared) / len(compared), 4) if compared else None
        failures = [built.failed[t] for t in entry.trajectories if t in built.failed]
        failures += [t.failure for t in mine if not t.complete and t.failure]
        if not mine:
            entry.reason = failures[0] if failures else "no trajectory was built"
        elif failures:
            entry.status, entry.reason = "incomplete", failures[0]
        else:
            entry.status = "built"
        if entry.status != "built":
            news(f"not built: {entry.notebook}: {entry.reason}")
