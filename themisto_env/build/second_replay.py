"""Replaying a cell a second time from a copy of the state before it: how a build tells chance from cause.

A step whose replay differs for no cause its outputs show is replayed again by `SecondReplays`: the state
before it is put back (snapshot, working folder, the process state the in-kernel helper kept, random
generators as another run would have them), the cell runs again, and the state after its first replay is
restored. Other outputs make it ``nondeterminism``; the same outputs make it ``environment`` unless an input
explains it: a writer of a name the cell reads whose values differ when replayed again makes it
``upstream``. At most `MAX_SECOND_REPLAYS` cells per trajectory, each under `SECOND_REPLAY_MAX_S`;
docs/data.md ("How the causes are found") gives the whole rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from themisto_env.build.as_recorded import run_recorded
from themisto_env.build.figures import without_over_cap
from themisto_env.build.timing import KEEP_STATE, SECOND_REPLAY, timed
from themisto_env.data.agreement import normalize_outputs
from themisto_env.data.cell_names import names_read
from themisto_env.data.sessions import RecordedExecution
from themisto_env.data.trajectory import Step, written_names
from themisto_env.errors import InfrastructureError, SnapshotError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.models import ExecutionResult
from themisto_env.sandbox.store.workdir import FileStore

MAX_SECOND_REPLAYS = 40
"""At most this many cells of a trajectory are replayed a second time."""
SECOND_REPLAY_MAX_S = 30.0
"""A cell whose first replay took longer is not replayed a second time."""
INPUT_DEPTH = 4
"""How many steps back the writers of a cell's inputs are followed (a writer's own inputs, and so on)."""
_SEEDS = re.compile(r"(?:\b|_)seed\s*\(")  # random.seed(0), np.random.seed(1), torch.manual_seed(2)


@dataclass
class _Before:
    """The state before a step: its snapshot, its working folder's files, and the recorded cell."""

    snapshot: str
    files: str | None
    execution: RecordedExecution
    seeded: bool  # the session had seeded the global random generators before it


@dataclass
class SecondReplays:
    """Second replays of one trajectory's steps, in one kernel.

    Args:
        kernel: The kernel the trajectory is replayed in.
        store: The dataset's file store (None: the working folder is not recorded).
        budget: How many second runs are left.
    """

    kernel: KernelLike
    store: FileStore | None = None
    budget: int = MAX_SECOND_REPLAYS
    _before: dict[int, _Before] = field(default_factory=dict)  # step index -> the state before it
    _writers: dict[str, Step] = field(default_factory=dict)  # name -> the step that last wrote it
    _previous: Step | None = None
    _seeded: bool = False  # a cell since the last restart seeded the global random generators

    def restarted(self) -> None:
        """The kernel was restarted: what was written before, and the seeds, are gone."""
        self._writers.clear()
        self._previous = None
        self._seeded = False

    def before_step(self, execution: RecordedExecution, snapshot: str | None, files: str | None) -> None:
        """Note the state before a step (``snapshot``: None when there is none) and, once the session
        seeded its random generators, keep their states under its index."""
        seeded = self._seeded
        self._seeded = seeded or bool(_SEEDS.search(execution.source))
        if self.budget <= 0 or snapshot is None:
            return
        self._before[execution.index] = _Before(snapshot, files, execution, seeded)
        with timed(KEEP_STATE):
            self.kernel.call("keep_process_state", random_key=str(execution.index) if seeded else None)

    def after_step(self, step: Step) -> None:
        """Replay the step again if its cause is undecided, and the writers of its inputs; note its writes.

        Raises:
            InfrastructureError: The kernel failed, or the state after the step could not be put back.
        """
        if step.agreement_kind == "other" and self._affordable(step):
            with timed(SECOND_REPLAY):
                again = self._run_again(step, step)
                if again is not None:
                    stable = normalize_outputs(again.outputs) == normalize_outputs(step.outputs)
                    step.replay_stable = stable
                    step.second_outputs = None if stable else without_over_cap(again.outputs)
                    if stable:
                        self._check_inputs(step)
        for name in written_names(step, self._previous):
            self._writers[name] = step
        self._previous = step

    def _affordable(self, step: Step) -> bool:
        return self.budget > 0 and step.index in self._before and step.duration_s < SECOND_REPLAY_MAX_S

    def _check_inputs(self, step: Step) -> None:
        """Replay again the writers (that agreed) of the names ``step`` reads, and theirs in turn (up to
        `INPUT_DEPTH` steps back), latest first; mark those whose values differ, and stop at the first."""
        checked: set[int] = set()
        reading = [step]
        for _ in range(INPUT_DEPTH):
            writers = {
                w.index: w
                for reader in reading
                for name in names_read(reader.source)
                if (w := self._writers.get(name)) is not None and w.index < reader.index and w.index not in checked
            }
            reading = []
            for writer in sorted(writers.values(), key=lambda w: -w.index):
                checked.add(writer.index)
                if writer.agreement_kind != "ok" or writer.replay_stable is not None or not self._affordable(writer):
                    continue
                again = self._run_again(writer, step)
                if again is None or again.fingerprint is None or writer.fingerprint is None:
                    continue
                writer.replay_stable = again.fingerprint == writer.fingerprint
                if not writer.replay_stable:
                    return
                reading.append(writer)
            if not reading:
                return

    def _run_again(self, step: Step, back_to: Step) -> ExecutionResult | None:
        """Run ``step``'s cell again from the state before it; then put back the state after ``back_to``.
        None where the state before could not be put back (nothing ran)."""
        before = self._before[step.index]
        if back_to.snapshot is None:
            return None
        kernel = self.kernel
        try:
            kernel.snapshots.restore(before.snapshot, keep=list(step.snapshot_skipped))
        except SnapshotError:
            return None
        self.budget -= 1
        self._set_files(before.files, back_to.files)
        if step is back_to:  # the process as the first run found it (kept before this step only)
            kernel.call("put_back_process_state")
        if before.seeded:  # seeded: another run draws the same; else it draws anew
            kernel.call("put_back_random_state", key=str(step.index))
        else:
            kernel.call("shuffle_random_state")
        kernel.call("reseed_generators")  # a generator made with no seed draws anew in another run too
        execution = before.execution
        result = run_recorded(
            kernel,
            execution.source,
            interrupted=execution.interrupted,
            duration_s=execution.duration_s,
            fingerprint=True,
            limit_s=step.limit_s,
        )
        try:
            kernel.snapshots.restore(back_to.snapshot, keep=list(back_to.snapshot_skipped))
        except SnapshotError as exc:
            raise InfrastructureError(f"could not return to the state after step {back_to.index}: {exc}") from exc
        self._set_files(back_to.files, None)  # the cell may have written files
        return None if result.kernel_restarted else result

    def _set_files(self, wanted: str | None, now: str | None) -> None:
        """Make the working folder hold ``wanted``'s files (it held ``now``'s; None: it may hold anything)."""
        if self.store is not None and wanted is not None and wanted != now:
            self.kernel.snapshots.set_files(self.store.tree(wanted), self.store)


__all__ = ["MAX_SECOND_REPLAYS", "SECOND_REPLAY_MAX_S", "SecondReplays"]
