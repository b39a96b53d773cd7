"""Building trajectories: replay recorded sessions in a sandbox kernel and record the runtime state.

``themisto data build SRC... --out DIR`` calls :func:`build_dataset`. Each session is replayed in a
kernel of the chosen backend, execution by execution, as the person performed them (restarting the
kernel where they did); after each execution the replayed outputs, time, memory, per-variable sizes and
a namespace snapshot are recorded.

The kernel runs in a private copy of the session's working folder (a notebook's own folder by default,
or ``workdir``; none for a JuNE log unless given): the folder's files are kept in the dataset's
``files/`` (content-addressed) and copied from there into the kernel's run directory, so cells read
files by relative path as the person's did, and what they write stays in the copy. After every step the
folder's content digest is recorded with the step (the files too), so that a state served later has the
files it had here. A session that fails midway (its kernel dies) keeps what was built
and says where and why; building again into the same folder skips what is already built.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from themisto_env.data.agreement import NORMALIZATION_VERSION, agreement
from themisto_env.data.samples import TASKS, SampleCounts, SampleRule, TaskName, sample_counts_by_trajectory
from themisto_env.data.sessions import RecordedExecution, Session
from themisto_env.data.trajectory import (
    FILES,
    TRAJECTORIES,
    Manifest,
    Step,
    Trajectory,
    append_trajectory,
    dump_json,
    iter_trajectories,
    refresh_agreement,
    write_manifest,
)
from themisto_env.errors import DataError, InfrastructureError
from themisto_env.progress import ProgressLine
from themisto_env.replay.build_sources import (  # re-exported: callers import them from here
    LOG_SUFFIXES,
    load_sessions,
    read_source,
    read_sources,
    source_files,
)
from themisto_env.replay.kernel_environments import use_kernel_environment
from themisto_env.replay.state import run_recorded
from themisto_env.sandbox.kernel import Kernel
from themisto_env.sandbox.kernel_helper import FINGERPRINT_VERSION
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.snapshots import SnapshotStore
from themisto_env.sandbox.workdir import EMPTY_TREE, FileStore, FileTree, scan

PACKAGES = ("ipykernel", "dill", "numpy", "pandas", "scikit-learn", "matplotlib")

ProgressHook = Callable[[str, int], None]


@dataclass
class BuildReport:
    """What a build did.

    Attributes:
        built: Trajectories replayed in full.
        skipped: Trajectories already built (unchanged).
        failed: Trajectories cut short (their kernel died): id -> where and why.
        bad_sources: Source files that could not be read (the build went on without them): path -> why.
        sources: Each source file read -> the ids of the trajectories it gave.
        steps: Steps replayed.
        seconds: Wall time.
    """

    built: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    bad_sources: dict[str, str] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    steps: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class WorkFolder:
    """The files a replay starts with: a folder's files, kept in the dataset's file store.

    Attributes:
        store: The dataset's file store.
        tree: The files (relative path -> sha256).
        digest: Their content digest.
        folder: The folder they came from (absolute; None: an empty folder).
    """

    store: FileStore
    tree: FileTree = field(default_factory=dict)
    digest: str = EMPTY_TREE
    folder: str | None = None


def session_folder(session: Session, workdir: str | Path | None = None) -> Path | None:
    """The folder a session's kernel runs in a copy of: ``workdir`` if given, else a notebook's own
    folder; None for a JuNE log without ``workdir`` (nothing says where its files were)."""
    if workdir is not None:
        return Path(workdir)
    if session.origin == "notebook" and session.source_path:
        return Path(session.source_path).parent
    return None


def work_folder(
    folder: str | Path | None, store: FileStore, limits: SandboxLimits, *, out: Path | None = None
) -> WorkFolder:
    """Keep a folder's files in ``store`` (None: an empty folder); a dataset folder ``out`` inside it is
    left out.

    Raises:
        FolderTooLargeError: The folder holds more than ``limits.workdir_mb`` (one line naming it).
        DataError: It does not exist or cannot be read.
    """
    if folder is None:
        return WorkFolder(store)
    inside = Path(os.path.abspath(out)) if out is not None else None
    root = Path(os.path.abspath(folder))
    skip = [inside.relative_to(root).as_posix()] if inside is not None and inside.is_relative_to(root) else []
    tree = scan(folder, limit_bytes=int(limits.workdir_mb * 2**20), skip=skip)
    return WorkFolder(store, tree, store.add(folder, tree), os.path.abspath(folder))


def record_files(kernel: Kernel, store: FileStore) -> str | None:
    """Keep the kernel's working folder as it is now; return its digest (None when it holds more than the
    limit, or a file cannot be read: the state after this step then has no recorded files)."""
    try:
        return store.add(kernel.workdir, kernel.files())
    except (DataError, InfrastructureError):
        return None


def trajectory_id(session: Session) -> str:
    """A stable, readable id: the notebook's name and the start of the session key."""
    name = session.notebook_name or Path(session.source_path or "session").stem
    slug = re.sub(r"[^A-Za-z0-9]+", "-", Path(name).stem).strip("-").lower() or "session"
    return f"{slug}-{re.sub(r'[^A-Za-z0-9]', '', session.key)[:8] or 'x'}"


def session_digest(session: Session) -> str:
    """Digest of what was recorded (sources and outputs), to notice a changed source."""
    return hashlib.sha256(dump_json(session.model_dump(mode="json", exclude={"source_path"})).encode()).hexdigest()[:16]


def outputs_agree(recorded: list[dict], replayed: list[dict]) -> bool:
    """Whether replayed outputs equal recorded ones once what legitimately varies is normalised (see
    :func:`themisto_env.data.agreement.agreement`, which also says why not)."""
    return agreement(recorded, replayed).agrees


def replay_execution(kernel: Kernel, execution: RecordedExecution, *, snapshots: bool) -> Step:
    """Run one recorded execution and record what the kernel did and holds afterwards: outputs, time,
    memory, per-variable sizes, the namespace fingerprint and (optionally) a snapshot."""
    result = run_recorded(
        kernel, execution.source, interrupted=execution.interrupted, duration_s=execution.duration_s, fingerprint=True
    )
    snapshot = kernel.snapshot() if snapshots and not result.kernel_restarted else None
    recorded = None if execution.status == "unknown" else execution.recorded_outputs
    verdict = agreement(recorded, result.outputs)
    return Step(
        index=execution.index,
        cell_id=execution.cell_id,
        source=execution.source,
        recorded_outputs=execution.recorded_outputs,
        recorded_duration_s=execution.duration_s,
        restarted_before=execution.restarted_before,
        interrupted=execution.interrupted,
        wedged=result.kernel_restarted,
        status=result.status,
        outputs=result.outputs,
        duration_s=round(result.duration_s, 6),
        memory_bytes=result.memory_bytes,
        variables=kernel.variable_sizes(),
        snapshot=snapshot.digest if snapshot else None,
        snapshot_skipped=snapshot.skipped if snapshot else {},
        fingerprint=result.fingerprint if result.fingerprint is not None else kernel.fingerprint(),
        agrees=verdict.agrees,
        agreement_kind=verdict.kind,
        agreement_detail=verdict.detail or None,
    )


def replay_session(
    session: Session,
    kernel: Kernel,
    *,
    snapshots: bool = True,
    on_step: ProgressHook | None = None,
    work: WorkFolder | None = None,
) -> Trajectory:
    """Replay a session in a (started) kernel, restarting it first, into a trajectory.

    With ``work``, the kernel's working folder is set to its files first, and the folder's content
    digest is recorded after every step (its files kept in ``work.store``); without, the working
    folder is left as it is and nothing about it is recorded.

    A kernel that dies midway ends the trajectory there: it is returned with ``complete=False`` and a
    ``failure`` that names the step and the reason, keeping the steps built so far.
    """
    trajectory = Trajectory(
        id=trajectory_id(session),
        session_key=session.key,
        notebook_name=session.notebook_name,
        user_id=session.user_id,
        origin=session.origin,
        source_path=session.source_path,
        source_digest=session_digest(session),
        backend=kernel.backend,
        environment=kernel.environment,
        fingerprint_version=FINGERPRINT_VERSION,
        normalization=NORMALIZATION_VERSION,
    )
    kernel.restart()
    if work is not None:
        kernel.set_files(work.tree, work.store)
        trajectory.workdir, trajectory.workdir_digest = work.folder, work.digest
    baseline = kernel.loaded_distributions()  # the kernel's own machinery, loaded before any cell
    used: dict[str, str] = {}

    def note_packages() -> None:  # what the cells imported, before a restart forgets it
        with contextlib.suppress(InfrastructureError):
            used.update((d, v) for d, v in kernel.loaded_distributions().items() if d not in baseline)

    for execution in session.executions:
        try:
            if execution.restarted_before and trajectory.steps:
                note_packages()
                kernel.restart()
            step = replay_execution(kernel, execution, snapshots=snapshots)
            if work is not None:
                step.files = record_files(kernel, work.store)
            trajectory.steps.append(step)
        except InfrastructureError as exc:
            trajectory.complete = False
            trajectory.failure = f"step {execution.index} (cell {execution.cell_id}): {exc}"
            kernel.restart()
            break
        finally:
            if on_step is not None:
                on_step(trajectory.id, execution.index)
    note_packages()
    trajectory.packages = dict(sorted(used.items()))
    refresh_agreement(trajectory, force=True)  # kinds that need the whole trajectory
    return trajectory


def is_built(
    trajectory: Trajectory,
    session: Session,
    backend: str,
    store: SnapshotStore,
    snapshots: bool,
    workdir_digest: str | None = None,
) -> bool:
    """Whether a built trajectory still stands for the session: complete, same source, same backend,
    same working folder content (when ``workdir_digest`` is given), fingerprinted by the current
    fingerprint version, and (when snapshots are wanted) every snapshot still in the store."""
    if workdir_digest is not None and trajectory.workdir_digest != workdir_digest:
        return False
    if not trajectory.complete or trajectory.source_digest != session_digest(session) or trajectory.backend != backend:
        return False
    if trajectory.fingerprint_version != FINGERPRINT_VERSION:
        return False
    return not snapshots or all(s.snapshot is None or s.snapshot in store for s in trajectory.steps)


def build_dataset(
    sources: Sequence[str | Path],
    out: str | Path,
    *,
    backend: str = "local",
    snapshots: bool = True,
    limits: SandboxLimits | None = None,
    snapshot_dir: str | Path | None = None,
    progress: bool = True,
    environment: str | None = None,
    workdir: str | Path | None = None,
) -> BuildReport:
    """Replay every session of the sources into a trajectory dataset folder.

    Args:
        sources: JuNE logs, notebooks, or folders of them.
        out: The dataset folder (created; an existing one is continued).
        backend: Sandbox backend to replay on.
        snapshots: Whether to snapshot the namespace after every step.
        limits: Sandbox limits (per-execution timeout, ...).
        snapshot_dir: The snapshot store; defaults to the user cache.
        progress: Show progress on stderr (a bar on a terminal, a line every few seconds when piped).
        environment: A kernel environment's name or id (``themisto kernel-env create``) to replay in; the
            manifest records it (and its requirements), so the env and the runner use it with no option.
        workdir: The folder every session's kernel runs in a copy of; default: a notebook's own folder,
            an empty folder for JuNE logs.

    Raises:
        FolderTooLargeError: A working folder holds more than ``limits.workdir_mb`` (nothing is built).
    """
    started = time.perf_counter()
    out = Path(out)
    report = BuildReport()
    read = read_sources(sources, report.bad_sources)  # before the folder is made: nothing readable, no folder
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        _build(read, out, report, backend, snapshots, limits, snapshot_dir, progress, environment, workdir)
    except BaseException:
        if created and not (out / TRAJECTORIES).exists():  # a failed first build leaves no empty folder
            shutil.rmtree(out, ignore_errors=True)
        raise
    report.seconds = time.perf_counter() - started
    return report


def _build(
    read: list[tuple[Path, Session]],
    out: Path,
    report: BuildReport,
    backend: str,
    snapshots: bool,
    limits: SandboxLimits | None,
    snapshot_dir: str | Path | None,
    progress: bool,
    environment: str | None,
    workdir: str | Path | None,
) -> None:
    sessions = [session for _, session in read]
    for path, session in read:
        report.sources.setdefault(str(path), []).append(trajectory_id(session))
    files = FileStore(out / FILES)
    folders: dict[Path | None, WorkFolder] = {}
    for session in sessions:  # every folder checked (size) and kept before any replay
        folder = session_folder(session, workdir)
        if folder not in folders:
            folders[folder] = work_folder(folder, files, limits or SandboxLimits(), out=out)
    existing = {t.id: t for t in iter_trajectories(out)}
    manifest = Manifest(backend=backend, snapshots=snapshots, sources=list(report.sources))
    manifest.workdirs = {w.folder: w.digest for w in folders.values() if w.folder is not None}
    manifest.normalization = NORMALIZATION_VERSION
    env_id = use_kernel_environment(environment, backend=backend, manifest=manifest, out=out)
    existing = {tid: t for tid, t in existing.items() if t.environment == env_id}  # others are replayed again
    total = sum(len(s.executions) for s in sessions)
    with (
        Kernel(backend, limits=limits, snapshot_dir=snapshot_dir, environment=env_id) as kernel,
        ProgressLine("replaying", total, show=progress) as bar,
    ):
        manifest.packages = kernel.package_versions(PACKAGES)  # the kernel's, which wrote the snapshots
        write_manifest(out, manifest)
        for session in sessions:
            tid = trajectory_id(session)
            previous = existing.get(tid)
            work = folders[session_folder(session, workdir)]
            if previous is not None and is_built(previous, session, backend, kernel.store, snapshots, work.digest):
                report.skipped.append(tid)
                bar.advance(len(session.executions))
                continue
            bar.update(description=f"replaying {tid}")
            done_before = bar.completed
            trajectory = replay_session(
                session, kernel, snapshots=snapshots, on_step=lambda _tid, _i: bar.advance(), work=work
            )
            bar.update(completed=done_before + len(session.executions))
            append_trajectory(out, trajectory)
            report.steps += len(trajectory.steps)
            if trajectory.complete:
                report.built.append(tid)
            else:
                report.failed[tid] = trajectory.failure or "incomplete"
    all_trajectories = list(iter_trajectories(out))
    for built in all_trajectories:  # every package a snapshot may need, with the version that wrote it
        manifest.packages.update(built.packages)
    workdirs = {t.workdir: t.workdir_digest for t in all_trajectories if t.workdir and t.workdir_digest}
    manifest.workdirs = dict(sorted({**workdirs, **manifest.workdirs}.items()))
    manifest.trajectories = len(all_trajectories)
    manifest.steps = sum(len(t.steps) for t in all_trajectories)
    write_manifest(out, manifest)


def source_sample_counts(
    out: str | Path, report: BuildReport, rule: SampleRule | None = None
) -> dict[str, dict[TaskName, SampleCounts]]:
    """What the sample rule made of each source of a build: per source and task, the candidates, what
    each filter dropped and what it kept, summed over the source's trajectories (the length quantile is
    the whole dataset's)."""
    trajectories = list(iter_trajectories(out))
    counts: dict[str, dict[TaskName, SampleCounts]] = {source: {} for source in report.sources}
    for task in TASKS:
        per_trajectory = sample_counts_by_trajectory(trajectories, task, rule)
        for source, ids in report.sources.items():
            parts = [per_trajectory[tid] for tid in dict.fromkeys(ids) if tid in per_trajectory]
            counts[source][task] = SampleCounts(*(sum(getattr(c, f.name) for c in parts) for f in fields(SampleCounts)))
    return counts


__all__ = [
    "LOG_SUFFIXES",
    "PACKAGES",
    "BuildReport",
    "WorkFolder",
    "build_dataset",
    "is_built",
    "load_sessions",
    "outputs_agree",
    "read_source",
    "record_files",
    "replay_execution",
    "replay_session",
    "session_digest",
    "session_folder",
    "source_files",
    "source_sample_counts",
    "trajectory_id",
    "work_folder",
]
