"""Replaying one session in a kernel into a trajectory: the unit of work of a build.

`replay_session` restarts the kernel, gives it the session's working folder (`WorkFolder`),
runs the recorded executions one by one as the person did (restarting where they did) and records after
each the replayed outputs, time, memory, per-variable sizes, the namespace fingerprint, a snapshot and
the working folder's files. `themisto_env.build.builder` hands sessions to kernels and writes the
dataset.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from themisto_env import tracing
from themisto_env.build.as_recorded import run_recorded
from themisto_env.build.figures import keep_figures
from themisto_env.build.second_replay import MAX_SECOND_REPLAYS, SecondReplays
from themisto_env.data.agreement import NORMALIZATION_VERSION, ReplayContext, agreement
from themisto_env.data.recorded_packages import canonical_name, recorded_versions, version_drift
from themisto_env.data.sessions import RecordedExecution, Session
from themisto_env.data.trajectory import Step, Trajectory, dump_json, refresh_agreement
from themisto_env.errors import DataError, InfrastructureError, SnapshotError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.helper import FINGERPRINT_VERSION
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.workdir import EMPTY_TREE, FileStore, FileTree, scan

ProgressHook = Callable[[str, int], None]

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})
"""An ``OSError`` of these behind a failed snapshot is the host's store that cannot be written (a full
disk, a read-only folder): the build stops, rather than record the session as cut short."""


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


def record_files(kernel: KernelLike, store: FileStore) -> str | None:
    """Keep the kernel's working folder as it is now; return its digest (None when it holds more than the
    limit, or a file cannot be read: the state after this step then has no recorded files)."""
    try:
        return store.add(kernel.snapshots.workdir, kernel.snapshots.files())
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


@dataclass(frozen=True)
class CellLimit:
    """How long a build lets each recorded cell run before it cuts it (a cut cell's step is ``timeout``).

    A cell whose recording says how long it took (a JuNE log's ``execute`` to ``finished_execute``) gets
    ``factor`` times that, never less than ``floor_s``; a cell with no recorded time (a saved notebook) gets
    ``unrecorded_s``, generous as nbclient (which has no limit by default). ``fixed_s`` (``themisto data
    build --cell-timeout``) gives every cell the same limit instead. The env's own kernels keep their
    ``limits.timeout_s`` for code a model wrote.

    Attributes:
        floor_s: The least a cell with a recorded time gets (``--min-cell-timeout``).
        factor: The multiple of the recorded time.
        unrecorded_s: The limit of a cell with no recorded time.
        fixed_s: One limit for every cell, if set.
    """

    floor_s: float = 60.0
    factor: float = 5.0
    unrecorded_s: float = 600.0
    fixed_s: float | None = None

    def for_cell(self, duration_s: float | None) -> float:
        """The limit of a cell whose recording took ``duration_s`` (None: not recorded)."""
        if self.fixed_s is not None:
            return self.fixed_s
        if duration_s is None:
            return max(self.floor_s, self.unrecorded_s)
        return max(self.floor_s, self.factor * duration_s)


def replay_execution(
    kernel: KernelLike, execution: RecordedExecution, *, snapshots: bool, limit: CellLimit | None = None
) -> Step:
    """Run one recorded execution and record what the kernel did and holds afterwards: outputs, time,
    memory, per-variable sizes, the namespace fingerprint and (optionally) a snapshot. Traced as a
    ``themisto.build.cell`` span."""
    where = {"themisto.step": execution.index, "themisto.cell.id": execution.cell_id}
    with tracing.span("themisto.build.cell", where) as span:
        step = _replay_execution(kernel, execution, snapshots=snapshots, limit=limit)
        outcome = {
            "themisto.cell.status": step.status,
            "themisto.cell.agrees": step.agrees,
            "themisto.cell.wedged": step.wedged,
        }
        tracing.record(span, {**outcome, "themisto.snapshot.digest": step.snapshot})
        return step


def _replay_execution(
    kernel: KernelLike, execution: RecordedExecution, *, snapshots: bool, limit: CellLimit | None
) -> Step:
    limit_s = (limit or CellLimit(floor_s=kernel.limits.timeout_s)).for_cell(execution.duration_s)
    result = run_recorded(
        kernel,
        execution.source,
        interrupted=execution.interrupted,
        duration_s=execution.duration_s,
        fingerprint=True,
        limit_s=limit_s,
    )
    snapshot = kernel.snapshots.save() if snapshots and not result.kernel_restarted else None
    recorded = None if execution.status == "unknown" else execution.recorded_outputs
    context = ReplayContext(status=result.status, interrupted=execution.interrupted, limit_s=limit_s)
    verdict = agreement(recorded, result.outputs, context=context)
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
        variables=kernel.introspect.variable_sizes(),
        snapshot=snapshot.digest if snapshot else None,
        snapshot_skipped=snapshot.skipped if snapshot else {},
        fingerprint=result.fingerprint if result.fingerprint is not None else kernel.introspect.fingerprint(),
        agrees=verdict.agrees,
        agreement_kind=verdict.kind,
        agreement_detail=verdict.detail or None,
        limit_s=limit_s,
    )


def replay_session(
    session: Session,
    kernel: KernelLike,
    *,
    snapshots: bool = True,
    on_step: ProgressHook | None = None,
    work: WorkFolder | None = None,
    limit: CellLimit | None = None,
) -> Trajectory:
    """Replay a session in a (started) kernel, restarting it first, into a trajectory.

    With ``work``, the kernel's working folder is set to its files first, and the folder's content
    digest is recorded after every step (its files kept in ``work.store``, and the figures the output
    cap would drop: `themisto_env.build.figures`); without, the working folder is left as it is
    and nothing about it is recorded. Each cell runs under ``limit``'s limit
    for it (default: `CellLimit` with the kernel's ``limits.timeout_s`` as the floor).

    With snapshots, a cell whose replay differs from the recording for no cause its outputs show is
    replayed a second time from a copy of the state before it, within a bound
    (`themisto_env.build.second_replay`). The package versions the source recorded
    (`recorded_versions`) are compared with the kernel's.

    A kernel that dies midway ends the trajectory there: it is returned with ``complete=False`` and a
    ``failure`` that names the step and the reason, keeping the steps built so far.

    Traced as a ``themisto.build.session`` span, the parent of its cells'.

    Raises:
        OSError: The snapshot store could not be written (no space, read-only, ...; see
            `STORAGE_ERRNOS`): nothing the user can get from going on.
    """
    where = {"themisto.trajectory.id": trajectory_id(session), "themisto.executions": len(session.executions)}
    with tracing.span("themisto.build.session", where) as span:
        trajectory = _replay_session(session, kernel, snapshots=snapshots, on_step=on_step, work=work, limit=limit)
        tracing.record(
            span, {"themisto.build.complete": trajectory.complete, "themisto.build.steps": len(trajectory.steps)}
        )
        if trajectory.failure:
            tracing.fail(span, trajectory.failure)
        return trajectory


def _replay_session(
    session: Session,
    kernel: KernelLike,
    *,
    snapshots: bool,
    on_step: ProgressHook | None,
    work: WorkFolder | None,
    limit: CellLimit | None,
) -> Trajectory:
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
        kernel.snapshots.set_files(work.tree, work.store)
        trajectory.workdir, trajectory.workdir_digest = work.folder, work.digest
    baseline = kernel.introspect.loaded_distributions()  # the kernel's own machinery, loaded before any cell
    used: dict[str, str] = {}
    recorded = recorded_versions(session.source_path, work.folder if work is not None else None)
    if recorded:
        trajectory.package_drift = version_drift(recorded, _installed(kernel, recorded))
    limit = limit or CellLimit(floor_s=kernel.limits.timeout_s)
    again = SecondReplays(kernel, work.store if work is not None else None, MAX_SECOND_REPLAYS if snapshots else 0)
    before = _empty_state(kernel) if snapshots else None
    files_before = work.digest if work is not None else None

    def note_packages() -> None:  # what the cells imported, before a restart forgets it
        with contextlib.suppress(InfrastructureError):
            used.update((d, v) for d, v in kernel.introspect.loaded_distributions().items() if d not in baseline)

    for execution in session.executions:
        try:
            if execution.restarted_before and trajectory.steps:
                note_packages()
                kernel.restart()
                before = _empty_state(kernel) if snapshots else None
                again.restarted()
            again.before_step(execution, before, files_before)
            step = replay_execution(kernel, execution, snapshots=snapshots, limit=limit)
            if work is not None:
                keep_figures(step.outputs, work.store)
                step.files = record_files(kernel, work.store)
            again.after_step(step)
            trajectory.steps.append(step)
            before, files_before = step.snapshot, step.files
            if step.wedged:
                again.restarted()
        except InfrastructureError as exc:
            if (unwritable := storage_failure(exc)) is not None:
                unwritable.filename = unwritable.filename or str(kernel.store.root)
                raise unwritable from exc
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


def _empty_state(kernel: KernelLike) -> str | None:
    """A snapshot of the (empty) namespace of a kernel just (re)started: the state before its first step,
    for a second replay of that step; None where it cannot be taken (that step is then not replayed twice)."""
    try:
        return kernel.snapshots.save().digest
    except SnapshotError:
        return None


def _installed(kernel: KernelLike, recorded: dict[str, str]) -> dict[str, str]:
    """The kernel's versions of the packages a source recorded (``absent`` where it has none)."""
    try:
        return {canonical_name(k): v for k, v in kernel.introspect.package_versions(list(recorded)).items()}
    except InfrastructureError:
        return {}


def storage_failure(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc`` when it is a store that cannot be written (`STORAGE_ERRNOS`);
    None for any other failure."""
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in STORAGE_ERRNOS:
            return cause
        cause = cause.__cause__
    return None


__all__ = [
    "STORAGE_ERRNOS",
    "CellLimit",
    "ProgressHook",
    "WorkFolder",
    "record_files",
    "replay_execution",
    "replay_session",
    "session_digest",
    "session_folder",
    "storage_failure",
    "trajectory_id",
    "work_folder",
]
