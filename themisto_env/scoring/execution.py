"""The execution score of a next-cell prediction: what it does, against what the target step did.

The prediction runs in a disposable kernel brought to the state before the target step
(`themisto_env.state.copies`), and its effects are compared with the target step's effects **as
recorded at build time**: the names it changed and their new fingerprints (Jaccard overlap of the names
matched by `same_effect`), and its outputs (chrF). The score is the mean of the two; a prediction whose own
code fails (``exit``, ``timeout``, ``memory``, ``processes``, ``unreadable``, ``tampered``) scores 0 with
that reason, never as an infrastructure failure. The threat model and what the score cannot see are in
docs/reward.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from themisto_env.data.trajectory import Trajectory
from themisto_env.errors import InfrastructureError
from themisto_env.metrics import score
from themisto_env.sandbox.rendering import render_outputs
from themisto_env.state.check import expected_fingerprint
from themisto_env.state.copies import CodeRun, DisposableKernels, changed_names

#: The output agreement (chrF, 0 to 1) a passing prediction reaches, its variables matching exactly.
PASS_OUTPUTS = 0.9


@dataclass(frozen=True)
class ExecutionScore:
    """An execution score: ``value`` in [0, 1], the mean of its ``variables`` part (matched changed names
    over all changed names; 1.0 when neither changes anything) and its ``outputs`` part (chrF; 1.0 when
    neither prints anything); ``failure`` says why the prediction scored 0 when its own code failed."""

    value: float
    variables: float = 0.0
    outputs: float = 0.0
    failure: str | None = None

    @property
    def passed(self) -> bool:
        """Whether the prediction did what the target step did: the same names changed to the same
        fingerprints, and outputs within `PASS_OUTPUTS` (pass@k counts these)."""
        return self.failure is None and self.variables == 1.0 and self.outputs >= PASS_OUTPUTS


def same_effect(recorded: str, measured: str) -> bool:
    """Whether a measured fingerprint entry matches a recorded one, for scoring: type and shape (or
    length) agree and, where the recording has a content hash, the measurement has the same one (a
    measurement without a hash matches nothing that was hashed: it cannot be checked)."""
    want, got = recorded.rsplit("|", 2), measured.rsplit("|", 2)
    if len(want) != 3 or len(got) != 3:
        return recorded == measured
    return want[:2] == got[:2] and (not want[2] or want[2] == got[2])


def recorded_effects(trajectory: Trajectory, step: int) -> dict[str, str] | None:
    """The names ``step`` changed, with their fingerprint after it, as recorded at build time; None when
    the fingerprints were not recorded (format 1 data)."""
    before, after = expected_fingerprint(trajectory, step), trajectory.steps[step].fingerprint
    return None if before is None or after is None else changed_names(before, after)


def score_run(run: CodeRun, trajectory: Trajectory, step: int) -> ExecutionScore | None:
    """Score what a prediction did (a `CodeRun` in the state before
    ``step``) against the recorded effects of ``step``; None when they were not recorded (format 1)."""
    truth = recorded_effects(trajectory, step)
    if truth is None:
        return None
    if run.failure is not None or run.changed is None:
        return ExecutionScore(0.0, failure=run.failure or "unreadable")
    target = trajectory.steps[step]
    predicted = run.changed
    union = set(truth) | set(predicted)
    matched = {name for name in set(truth) & set(predicted) if same_effect(truth[name], predicted[name])}
    variables = len(matched) / len(union) if union else 1.0
    produced, wanted = render_outputs(run.outputs), render_outputs(target.outputs)
    outputs = 1.0 if not produced.strip() and not wanted.strip() else score(produced, wanted).chrf
    return ExecutionScore((variables + outputs) / 2, variables=variables, outputs=outputs)


def execution_score(
    kernels: DisposableKernels, trajectory: Trajectory, step: int, code: str, *, timeout_s: float
) -> ExecutionScore | None:
    """Run ``code`` in a disposable kernel in the state before ``step`` and score its effects against the
    recorded effects of ``step``; None when those were not recorded (format 1 data).

    Raises:
        InfrastructureError: The disposable kernel could not be brought to the state (nothing
            model-written ran), or the backend is gone.
    """
    if recorded_effects(trajectory, step) is None:  # nothing to compare with: do not run the code
        return None
    return score_run(kernels.run(trajectory, step, code, timeout_s=timeout_s), trajectory, step)


def execution_scores(
    kernels: DisposableKernels, trajectory: Trajectory, step: int, codes: Sequence[str], *, timeout_s: float
) -> list[ExecutionScore | InfrastructureError | None]:
    """[`execution_score`][themisto_env.scoring.execution_score] of each piece of code of a group (a GRPO
    group's completions of one sample), run as `DisposableKernels.run_many` runs them (copies forked ahead,
    a few at once, each scored as it would be alone); in order, a run the machinery failed as its error. All
    None when the step's effects were not recorded (format 1 data: nothing runs).

    Raises:
        BackendUnavailableError: The backend is gone.
    """
    if recorded_effects(trajectory, step) is None:
        return [None] * len(codes)
    runs = kernels.run_many(trajectory, step, codes, timeout_s=timeout_s)
    return [run if isinstance(run, InfrastructureError) else score_run(run, trajectory, step) for run in runs]
