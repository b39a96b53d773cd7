"""A build's sessions replayed on Ray actors across a cluster (``themisto data build --ray ADDRESS``).

Each actor (`SessionReplayer`, one CPU) owns one kernel on its node and replays whole sessions, handed out
longest first; ``ADDRESS`` means what it means for ``themisto run --ray``. Snapshots and working-folder
files a node kept in its own store are fetched through Ray, checked and added to the driver's store; a lost
worker's session goes to another worker. What every node needs is in docs/data.md ("Faster builds").
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto_env.build.session_replay import CellLimit, replay_session
from themisto_env.data.trajectory import Trajectory
from themisto_env.errors import DataError, InfrastructureError, ThemistoError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.ray.cluster import (
    adopt_owner_variables,
    connect,
    import_ray,
    interruptible_children,
    owner_variables,
)
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.store.workdir import EMPTY_TREE, FileStore, FileTree

if TYPE_CHECKING:
    from themisto_env.build.workers import ReplayJob, ReplaySink

ATTEMPTS = 2
"""How many workers a session is handed to before it is listed as failed (a worker lost each time)."""


ACTOR_PREFIX = "themisto-build-"
"""Actors are named ``themisto-build-<driver pid>-<n>``."""


class SessionReplayer:
    """One Ray actor: a kernel on its node, replaying the sessions it is handed.

    Args:
        backend: The kernel backend.
        limits: The kernel's limits.
        snapshot_dir: The snapshot store (None: the node's cache).
        environment: The kernel environment's id (None: the tool's own Python).
        snapshots: Whether to snapshot after every step.
        driver_variables: The driver's values of
            `OWNER_VARIABLES` (None: unset), for the kernels.
        limit: Each cell's limit (default: `CellLimit` with ``limits.timeout_s`` as the floor).
    """

    def __init__(
        self,
        backend: str,
        limits: SandboxLimits | None,
        snapshot_dir: str | None,
        environment: str | None,
        snapshots: bool,
        driver_variables: dict[str, str | None],
        limit: CellLimit | None = None,
    ) -> None:
        adopt_owner_variables(driver_variables)  # what the kernels started here inherit
        self.kernel = Kernel(backend, limits=limits, snapshot_dir=snapshot_dir, environment=environment)
        self.snapshots = snapshots
        self.limit = limit

    def start(self, packages: Sequence[str]) -> dict[str, Any]:
        """Start the kernel: ``{"packages": versions}``, or ``{"error": exception}`` when it cannot."""
        try:
            with interruptible_children():
                self.kernel.start()
            return {"packages": self.kernel.introspect.package_versions(packages)}
        except (ThemistoError, OSError) as exc:
            return {"error": exc}

    def replay(self, job: ReplayJob) -> dict[str, Any]:
        """Replay a session: ``{"trajectory": json}``, or ``{"error": exception}`` when the build must stop
        (its files cannot be read here, the store is full)."""

        try:
            missing = [p for p, sha in job.work.tree.items() if not job.work.store.blob_path(sha).exists()]
            if missing:
                return {
                    "error": DataError(
                        f"the dataset's files folder is not readable on Ray node {self.node()} ({missing[0]} is "
                        "missing): a build on Ray needs the dataset folder at the same path on every node (a shared "
                        "folder) for sessions with a working folder",
                        path=job.work.store.root,
                    )
                }
            with interruptible_children():  # the replay restarts the kernel: a new process
                trajectory = replay_session(
                    job.session, self.kernel, snapshots=self.snapshots, work=job.work, limit=self.limit
                )
            return {"trajectory": trajectory.model_dump_json()}
        except (ThemistoError, OSError) as exc:
            return {"error": exc}

    def snapshot(self, digest: str) -> tuple[bytes, list[str]] | None:
        """A snapshot's bytes and the kernel environments that wrote it (None: not in this node's store)."""
        store = self.kernel.store
        if digest not in store:
            return None
        return store.path(digest).read_bytes(), sorted(store.environments(digest))

    def files(self, root: str, digest: str) -> tuple[FileTree, dict[str, bytes]] | None:
        """A recorded working folder from this node's file store: its tree and contents (None: not here)."""
        store = FileStore(root)
        if digest not in store:
            return None
        tree = store.tree(digest)
        return tree, {sha: store.read(sha, name=path) for path, sha in tree.items()}

    def node(self) -> str:
        """Where this actor runs (host name and process id)."""
        return f"{os.uname().nodename}:{os.getpid()}"

    def close(self) -> None:
        """Close the kernel."""
        self.kernel.close()


def replay_on_ray(
    jobs: Sequence[ReplayJob],
    workers: int,
    address: str,
    *,
    backend: str,
    limits: SandboxLimits | None,
    snapshot_dir: str | Path | None,
    environment: str | None,
    snapshots: bool,
    sink: ReplaySink,
    packages: Sequence[str],
    limit: CellLimit | None = None,
) -> None:
    """Replay the jobs on ``workers`` Ray actors (one kernel each), reporting to ``sink`` as sessions end.

    Args:
        jobs: The sessions, in the order to hand them out (longest first balances best).
        workers: How many actors (no more than there are jobs, at least one).
        address: ``local``, ``auto`` or a cluster address (see `themisto_env.sandbox.ray.cluster`).
        backend: The kernel backend on every node.
        limits: The kernels' limits.
        snapshot_dir: The snapshot store, at this path on every node (None: each node's cache); the
            driver's own store ends with every snapshot.
        environment: The kernel environment's id.
        snapshots: Whether to snapshot after every step.
        sink: Where kernels and trajectories are reported (executions are counted as their session ends).
        packages: The distributions whose versions each kernel reports when it is ready.
        limit: Each cell's limit (see `CellLimit`).

    Raises:
        ProviderError: Ray is not installed.
        ThemistoError | OSError: What stopped a worker (a kernel that cannot start, a files folder a node
            cannot read, a full store), once every actor is closed.
        InfrastructureError: No worker could be started.
    """
    ray = import_ray()
    lost_errors = _lost_errors(ray)
    started = connect(address, num_cpus=workers)
    store = SnapshotStore(snapshot_dir)
    actor_class = ray.remote(num_cpus=1, max_restarts=0)(SessionReplayer)
    where = str(snapshot_dir) if snapshot_dir is not None else None
    count = max(1, min(workers, len(jobs)))
    named = [actor_class.options(name=f"{ACTOR_PREFIX}{os.getpid()}-{i}") for i in range(count)]  # findable
    variables = owner_variables()
    actors = [actor.remote(backend, limits, where, environment, snapshots, variables, limit) for actor in named]
    try:
        alive = []
        for actor, answer in zip(actors, [a.start.remote(list(packages)) for a in actors], strict=True):
            try:
                ready = ray.get(answer)
            except lost_errors:
                continue
            if "error" in ready:
                raise ready["error"]
            sink.started(ready["packages"])
            alive.append(actor)
        if not alive:
            raise InfrastructureError("no Ray worker could be started for the build")
        _hand_out(ray, jobs, alive, store, sink, lost_errors)
    finally:
        with contextlib.suppress(Exception):  # an actor that died has nothing left to close
            ray.get([a.close.remote() for a in actors], timeout=60)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if started:
            ray.shutdown()


def _hand_out(
    ray: Any, jobs: Sequence[ReplayJob], alive: list[Any], store: SnapshotStore, sink: ReplaySink, lost_errors: tuple
) -> None:
    """Give each free actor the next job until none is left; a lost actor's job goes to another."""
    todo = collections.deque(jobs)
    attempts: collections.Counter[int] = collections.Counter()
    pending: dict[Any, tuple[Any, ReplayJob]] = {}

    def hand_to_idle() -> None:
        busy = {id(actor) for actor, _ in pending.values()}
        for actor in alive:
            if todo and id(actor) not in busy:
                job = todo.popleft()
                pending[actor.replay.remote(job)] = (actor, job)

    hand_to_idle()
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        actor, job = pending.pop(done[0])
        try:
            answer = ray.get(done[0])
        except lost_errors as exc:  # the worker died (its process, its node): nothing of the session kept
            alive.remove(actor)
            attempts[job.position] += 1
            why = f"its Ray worker was lost ({type(exc).__name__})"
            if attempts[job.position] < ATTEMPTS and alive:
                sink.retried(job, why)
                todo.appendleft(job)
            else:
                sink.lost(job, f"{why}; run the same command again to replay it")
            if not alive:
                while todo:
                    sink.lost(todo.popleft(), "every Ray worker was lost; run the same command again to replay it")
            hand_to_idle()
            continue
        if "error" in answer:
            raise answer["error"]
        trajectory = Trajectory.model_validate_json(answer["trajectory"])
        _fetch_missing(ray, actor, trajectory, store, job.work.store)
        sink.finished(job, trajectory)
        hand_to_idle()


def _fetch_missing(ray: Any, actor: Any, trajectory: Trajectory, store: SnapshotStore, files: FileStore) -> None:
    """Copy into the driver's stores the snapshots and recorded files of a trajectory they lack.

    Raises:
        InfrastructureError: The actor's node no longer has one, or its bytes do not hash to its name.
    """
    for digest in dict.fromkeys(s.snapshot for s in trajectory.steps if s.snapshot and s.snapshot not in store):
        fetched = ray.get(actor.snapshot.remote(digest))
        if fetched is None or hashlib.sha256(fetched[0]).hexdigest() != digest:
            raise InfrastructureError(f"snapshot {digest[:12]} of {trajectory.id} could not be fetched from its worker")
        store.add(digest, fetched[0])
        for environment in fetched[1]:
            store.note_environment(digest, environment)
    recorded = [trajectory.workdir_digest, *(s.files for s in trajectory.steps)]
    for digest in dict.fromkeys(d for d in recorded if d and d != EMPTY_TREE and d not in files):
        fetched = ray.get(actor.files.remote(str(files.root), digest))
        if fetched is None:
            raise InfrastructureError(f"files {digest[:12]} of {trajectory.id} could not be fetched from its worker")
        tree, contents = fetched
        with tempfile.TemporaryDirectory(prefix="themisto-fetched-") as folder:
            for path, sha in tree.items():
                target = Path(folder) / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(contents[sha])
            if files.add(folder, tree) != digest:
                raise InfrastructureError(f"files {digest[:12]} of {trajectory.id} came back changed from its worker")


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors for a worker that is gone (its process or node), rather than an error of the work."""
    errors = ray.exceptions
    return (errors.RayActorError, errors.ObjectLostError, errors.NodeDiedError, errors.WorkerCrashedError)


__all__ = ["ACTOR_PREFIX", "ATTEMPTS", "SessionReplayer", "replay_on_ray"]
