"""Building trajectories: replay recorded sessions in a sandbox kernel and record the runtime state.

``themisto data build SRC... --out DIR`` calls [`build_dataset`][themisto_env.build.build_dataset]: each session
is replayed execution by execution in a kernel of the chosen backend, in a private copy of its working
folder, recording after each step the outputs, time, memory, variable sizes, a namespace snapshot and the
folder's digest. Sessions can run on several kernels (``workers``) or Ray actors
(`themisto_env.build.ray_workers`), one session per worker; the dataset is the same either way, each
trajectory is appended as it finishes, and building again into the folder skips what is built.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from themisto_env.build.figures import BUILD_IMAGE_BYTES
from themisto_env.build.session_replay import (
    CellLimit,
    WorkFolder,
    replay_session,
    session_digest,
    session_folder,
    trajectory_id,
    work_folder,
)
from themisto_env.build.session_sources import read_sources
from themisto_env.build.timing import TimedKernel, measuring, timing_summary
from themisto_env.build.workers import ReplayJob, replay_here, replay_on_threads
from themisto_env.data.agreement import NORMALIZATION_VERSION
from themisto_env.data.sessions import Session
from themisto_env.data.trajectory import (
    FILES,
    TRAJECTORIES,
    EnvironmentRef,
    Manifest,
    Trajectory,
    append_trajectory,
    iter_trajectories,
    write_manifest,
)
from themisto_env.data.writes import write_text_atomic
from themisto_env.errors import ConfigError
from themisto_env.progress import ProgressLine
from themisto_env.sandbox.environments.docker_image import ready
from themisto_env.sandbox.environments.environment_registry import names_of, note_dataset, resolve
from themisto_env.sandbox.environments.environment_spec import REQUIREMENTS_FILE
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.helper import FINGERPRINT_VERSION
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.snapshot_store import DEFAULT_ENVIRONMENT, SnapshotStore
from themisto_env.sandbox.store.workdir import FileStore

PACKAGES = ("ipykernel", "dill", "numpy", "pandas", "scikit-learn", "matplotlib")


@dataclass
class BuildReport:
    """What a build did.

    Attributes:
        built: Trajectories replayed in full.
        skipped: Trajectories already built (unchanged).
        failed: Trajectories cut short (their kernel died) or not replayed (every worker given the
            session was lost): id -> where and why.
        retried: Sessions handed to another worker after theirs was lost (Ray): id -> why.
        bad_sources: Source files that could not be read (the build went on without them): path -> why.
        sources: Each source file read -> the ids of the trajectories it gave.
        steps: Steps replayed.
        seconds: Wall time.
        cut: Cells the per-cell limit cut (their steps are ``timeout``): trajectory id -> step indexes.
        longest_limit_s: The longest limit a cut cell had (what a rebuild must exceed).
        timings: Per trajectory replayed in this process, the seconds of its replay and of its parts
            (`themisto_env.build.timing`; none for sessions replayed on Ray).
    """

    built: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    retried: dict[str, str] = field(default_factory=dict)
    bad_sources: dict[str, str] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    steps: int = 0
    seconds: float = 0.0
    cut: dict[str, list[int]] = field(default_factory=dict)
    longest_limit_s: float = 0.0
    timings: dict[str, dict[str, float]] = field(default_factory=dict)

    def timing(self, trajectories: Sequence[Trajectory] = ()) -> dict[str, Any]:
        """The build's timing figures (`themisto_env.build.timing.timing_summary`), the
        executions counted from ``trajectories`` (the dataset's)."""
        return timing_summary(self.timings, {t.id: len(t.steps) for t in trajectories})


def is_built(
    trajectory: Trajectory,
    session: Session,
    backend: str,
    store: SnapshotStore,
    snapshots: bool,
    workdir_digest: str | None = None,
    limit: CellLimit | None = None,
) -> bool:
    """Whether a built trajectory still stands for the session: complete, same source, same backend,
    same working folder content (when ``workdir_digest`` is given), fingerprinted by the current
    fingerprint version, no cell cut at a limit shorter than ``limit`` now gives it, and (when snapshots
    are wanted) every snapshot still in the store."""
    if workdir_digest is not None and trajectory.workdir_digest != workdir_digest:
        return False
    if not trajectory.complete or trajectory.source_digest != session_digest(session) or trajectory.backend != backend:
        return False
    if trajectory.fingerprint_version != FINGERPRINT_VERSION:
        return False
    if limit is not None and any(
        s.agreement_kind == "timeout" and (s.limit_s or 0.0) < limit.for_cell(s.recorded_duration_s)
        for s in trajectory.steps
    ):
        return False  # cut at a shorter limit than it gets now: replayed again
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
    workers: int = 1,
    ray: str | None = None,
    cell_timeout: float | None = None,
    min_cell_timeout: float | None = None,
) -> BuildReport:
    """Replay every session of the sources into a trajectory dataset folder.

    Args:
        sources: JuNE logs, notebooks, or folders of them.
        out: The dataset folder (created; an existing one is continued).
        backend: Sandbox backend to replay on.
        snapshots: Whether to snapshot the namespace after every step.
        limits: Sandbox limits (``timeout_s``: how long one call of the in-kernel helper, a snapshot or a
            state check, may take; and the least a recorded cell is given when ``min_cell_timeout`` is None).
        snapshot_dir: The snapshot store; defaults to the user cache.
        progress: Show progress on stderr (a bar on a terminal, a line every few seconds when piped).
        environment: A kernel environment's name or id (``themisto kernel-env create``) to replay in; the
            manifest records it (and its requirements), so the env and the runner use it with no option.
        workdir: The folder every session's kernel runs in a copy of; default: a notebook's own folder,
            an empty folder for JuNE logs.
        workers: How many sessions to replay at once, each in its own kernel (on threads of this
            process; with ``ray``, the number of Ray actors).
        ray: Replay on Ray actors: ``local`` (a private instance, shut down after), ``auto`` or a cluster
            address (``HOST:6379``, ``ray://HOST:10001``). On a cluster the dataset folder's ``files/``
            must be at the same path on every node (a shared folder) for sessions with a working folder;
            snapshots a node keeps to itself are copied into this machine's store.
        cell_timeout: One limit for every cell, in seconds (default: a multiple of the cell's recorded
            time, never below ``min_cell_timeout``; 10 minutes for a cell with no recorded time).
        min_cell_timeout: The least a cell with a recorded time is given, in seconds (see
            `themisto_env.build.session_replay.CellLimit`; None: ``limits.timeout_s``).

    Raises:
        ConfigError: ``workers`` is below 1.
        FolderTooLargeError: A working folder holds more than ``limits.workdir_mb`` (nothing is built).
        OSError: The dataset folder or the snapshot store cannot be written (a full disk, ...): the
            trajectories finished before are kept, building again goes on from them.
    """
    if workers < 1:
        raise ConfigError(f"workers: {workers} is not a number of kernels; give 1 or more")
    if cell_timeout is not None and cell_timeout <= 0:
        raise ConfigError(f"cell_timeout: {cell_timeout:g} is not a limit; give a number of seconds above 0")
    limits = limits or SandboxLimits()
    if not limits.image_limit_bytes:  # figures past the output cap go to the dataset's files/, not away
        limits = limits.model_copy(update={"image_limit_bytes": BUILD_IMAGE_BYTES})
    if min_cell_timeout is not None and min_cell_timeout <= 0:
        raise ConfigError(f"min_cell_timeout: {min_cell_timeout:g} is not a limit; give a number of seconds above 0")
    floor = min_cell_timeout if min_cell_timeout is not None else limits.timeout_s
    limit = CellLimit(floor_s=floor, fixed_s=cell_timeout)
    started = time.perf_counter()
    out = Path(out)
    report = BuildReport()
    read = read_sources(sources, report.bad_sources)  # before the folder is made: nothing readable, no folder
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        _build(
            read, out, report, backend, snapshots, limits, snapshot_dir, progress, environment, workdir, workers, ray,
            limit,
        )  # fmt: skip
    except BaseException:
        if created and not (out / TRAJECTORIES).exists():  # a failed first build leaves no empty folder
            shutil.rmtree(out, ignore_errors=True)
        raise
    report.seconds = time.perf_counter() - started
    return report


class _BuildLog:
    """Where the workers' results go: each trajectory appended to the dataset as it finishes (whole or
    not at all), the report, the progress line, and the manifest once the first kernel is ready. Its
    methods are called under one lock (`ReplaySink`)."""

    def __init__(self, out: Path, report: BuildReport, bar: ProgressLine, manifest: Manifest, jobs: int) -> None:
        self.out, self.report, self.bar, self.manifest = out, report, bar, manifest
        self.jobs, self.done = jobs, 0
        self.positions: dict[str, int] = {}  # trajectory id -> the session it was kept from
        self.counted: dict[int, int] = {}  # job position -> executions counted so far
        self.active: dict[int, str] = {}  # job position -> trajectory id, of the sessions under way
        self.manifest_written = False

    def started(self, packages: dict[str, str]) -> None:
        if not self.manifest_written:  # the kernels' package versions, which wrote the snapshots
            self.manifest.packages = packages
            write_manifest(self.out, self.manifest)
            self.manifest_written = True

    def step(self, job: ReplayJob) -> None:
        if job.position not in self.counted:  # its first execution: the sessions under way are shown
            self.counted[job.position] = 0
            self.active[job.position] = trajectory_id(job.session)
            self.bar.update(description=f"replaying {', '.join(self.active.values())}")
        self.counted[job.position] += 1
        self.bar.advance()

    def finished(self, job: ReplayJob, trajectory: Trajectory) -> None:
        self._count(job)
        tid = trajectory.id
        if self.positions.get(tid, -1) > job.position:
            return  # two sessions of one id: the later one is kept, as a build in order keeps it
        self.positions[tid] = job.position
        append_trajectory(self.out, trajectory)
        self.report.steps += len(trajectory.steps)
        cut = [s for s in trajectory.steps if s.agreement_kind == "timeout"]
        if cut:
            self.report.cut[tid] = [s.index for s in cut]
            self.report.longest_limit_s = max(self.report.longest_limit_s, *(s.limit_s or 0.0 for s in cut))
        if trajectory.complete:
            self.report.built.append(tid)
        else:
            self.report.failed[tid] = trajectory.failure or "incomplete"

    def lost(self, job: ReplayJob, why: str) -> None:
        self._count(job)
        self.report.failed[trajectory_id(job.session)] = why

    def retried(self, job: ReplayJob, why: str) -> None:
        self.report.retried[trajectory_id(job.session)] = why

    def _count(self, job: ReplayJob) -> None:
        """A session ended: its executions not counted yet (those a failure left, or all on Ray) are."""
        self.done += 1
        self.active.pop(job.position, None)
        counted = self.counted.pop(job.position, None)
        if counted is None:  # counted as sessions end (Ray)
            self.bar.update(description=f"replaying ({self.done}/{self.jobs} sessions done)")
        self.bar.advance(job.executions - (counted or 0))


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
    workers: int,
    ray: str | None,
    limit: CellLimit,
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
    store = SnapshotStore(snapshot_dir)
    jobs: list[ReplayJob] = []
    done = 0
    for position, session in enumerate(sessions):
        work = folders[session_folder(session, workdir)]
        previous = existing.get(trajectory_id(session))
        if previous is not None and is_built(previous, session, backend, store, snapshots, work.digest, limit):
            report.skipped.append(previous.id)
            done += len(session.executions)
        else:
            jobs.append(ReplayJob(position, session, work))
    total = sum(len(s.executions) for s in sessions)

    def start_kernel() -> Kernel:
        return Kernel(backend, limits=limits, snapshot_dir=snapshot_dir, environment=env_id)

    def replay(kernel: Kernel, job: ReplayJob, step: Callable[[], None]) -> Trajectory:
        timed = cast(Kernel, TimedKernel(kernel))
        with measuring() as seconds:
            trajectory = replay_session(
                job.session, timed, snapshots=snapshots, on_step=lambda _t, _i: step(), work=job.work, limit=limit
            )
        report.timings[trajectory.id] = seconds  # one key per session: safe across worker threads
        return trajectory

    with ProgressLine("replaying", total, completed=done, show=progress) as bar:
        log = _BuildLog(out, report, bar, manifest, len(jobs))
        longest_first = sorted(jobs, key=lambda job: -job.executions)
        if ray is not None and jobs:
            from themisto_env.build.ray_workers import replay_on_ray

            replay_on_ray(
                longest_first, workers, ray, backend=backend, limits=limits, snapshot_dir=snapshot_dir,
                environment=env_id, snapshots=snapshots, sink=log, packages=PACKAGES, limit=limit,
            )  # fmt: skip
        elif workers > 1 and len(jobs) > 1:
            replay_on_threads(longest_first, workers, start_kernel, replay, log, PACKAGES)
        else:
            replay_here(jobs, start_kernel, replay, log, PACKAGES)
    write_in_order(out, [trajectory_id(s) for s in sessions])
    all_trajectories = list(iter_trajectories(out))
    for built in all_trajectories:  # every package a snapshot may need, with the version that wrote it
        manifest.packages.update(built.packages)
    workdirs = {t.workdir: t.workdir_digest for t in all_trajectories if t.workdir and t.workdir_digest}
    manifest.workdirs = dict(sorted({**workdirs, **manifest.workdirs}.items()))
    manifest.trajectories = len(all_trajectories)
    manifest.steps = sum(len(t.steps) for t in all_trajectories)
    write_manifest(out, manifest)


def write_in_order(out: Path, order: Sequence[str]) -> None:
    """Rewrite ``trajectories.jsonl`` with one line per trajectory (its last), at once: first those no
    id in ``order`` names (as they were), then ``order``'s (the build's sessions, in source order), so
    that a build on workers, or one killed and resumed, leaves the file a build in order leaves."""
    path = out / TRAJECTORIES
    if not path.exists():
        return
    lines: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                tid = json.loads(line)["id"]
                lines.pop(tid, None)  # the last line wins, in its place
                lines[tid] = line if line.endswith("\n") else line + "\n"
    wanted = dict.fromkeys(tid for tid in order if tid in lines)
    kept = [tid for tid in lines if tid not in wanted]
    write_text_atomic(path, "".join(lines[tid] for tid in [*kept, *wanted]))


def use_kernel_environment(name_or_id: str | None, *, backend: str, manifest: Manifest, out: str | Path) -> str | None:
    """For ``themisto data build --kernel-env``: the environment's id (None: the tool's own Python), recorded in
    ``manifest`` with its requirements (also written to ``out/environment-requirements.txt``).

    Raises:
        ConfigError: No such environment.
        BackendUnavailableError: Its docker image is needed and cannot be built.
    """
    if name_or_id is None or name_or_id == DEFAULT_ENVIRONMENT:
        manifest.environment = None
        return None
    record = ready(resolve(name_or_id), backend)
    names = names_of(record.id)
    manifest.environment = EnvironmentRef(
        id=record.id,
        name=name_or_id if name_or_id in names else (names[0] if names else None),
        python=record.spec.python,
        requirements=record.spec.requirements_txt(),
        apt=record.spec.apt,
    )
    (Path(out) / REQUIREMENTS_FILE).write_text(record.spec.requirements_txt())
    note_dataset(record.id, out)
    return record.id


__all__ = [
    "PACKAGES",
    "BuildReport",
    "build_dataset",
    "is_built",
    "use_kernel_environment",
    "write_in_order",
]
