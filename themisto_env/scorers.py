"""Scorers that run code: the execution-based score of a next-cell prediction.

Beside the text metrics (:mod:`themisto_env.metrics`), a next-cell prediction can be scored by what it
*does*: it is run in a kernel in the state before the target step, and its effects are compared with the
target step's effects **as recorded at build time** (never by re-running the target in a kernel the
prediction touched):

* variables: the names whose fingerprint the step changed (created, rebound, mutated, deleted), from
  the fingerprints recorded before and after the target step, against the names the prediction changed,
  from live fingerprints before and after it. A name counts as matched when both changed it and its
  new fingerprint agrees (:func:`themisto_env.state.diff_fingerprints`); the variable part is the
  Jaccard overlap of matched names over all changed names (1.0 when neither changes anything);
* outputs: chrF between the prediction's rendered outputs and the target step's recorded outputs (1.0
  when both print nothing).

The score is the mean of the two, in [0, 1]. A prediction that kills the kernel (``os._exit``, the
memory limit, a fork bomb), runs past the time limit, or breaks the in-kernel helper so that its effects
cannot be read scores 0 with a reason (``prediction_failed``): the model's own failure, counted in the
summary, never an infrastructure failure. The caller must treat the kernel as tainted afterwards.
Hardening against predictions that attack the scorer itself is the subject of the sandbox work on
model-written code; this module is only honest about what it compares.
"""

from __future__ import annotations

from dataclasses import dataclass

from themisto_env.errors import BackendUnavailableError, InfrastructureError, KernelDiedError
from themisto_env.metrics import score
from themisto_env.rendering import render_outputs
from themisto_env.sandbox.kernel import Kernel
from themisto_env.state import diff_fingerprints, expected_fingerprint
from themisto_env.trajectory import Trajectory

_DELETED = "<deleted>||"


def changed_names(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Names whose fingerprint differs between two states, with their new fingerprint."""
    names = set(before) | set(after)
    return {
        name: after.get(name, _DELETED)
        for name in names
        if name not in before or name not in after or diff_fingerprints({name: before[name]}, {name: after[name]})
    }


@dataclass(frozen=True)
class ExecutionScore:
    """An execution score: ``value`` in [0, 1]; ``failure`` says why the prediction scored 0 when its
    own code failed (``exit``, ``memory``, ``timeout``, ``unreadable``), else None."""

    value: float
    failure: str | None = None


def execution_score(
    kernel: Kernel, trajectory: Trajectory, step: int, code: str, *, timeout_s: float
) -> ExecutionScore | None:
    """Run ``code`` in ``kernel`` (in the state before ``step``) and score its effects against the
    recorded effects of ``step``; None when the step's effects were not recorded (format 1 data).

    Raises:
        InfrastructureError: The kernel failed before the prediction ran (its state could not be read),
            or the backend is gone.
    """
    target = trajectory.steps[step]
    recorded_before = expected_fingerprint(trajectory, step)
    if recorded_before is None or target.fingerprint is None:
        return None
    truth = changed_names(recorded_before, target.fingerprint)
    before = kernel.fingerprint()  # a failure here is the machinery's: nothing model-written ran yet
    try:
        result = kernel.execute(code, timeout_s=timeout_s)
        if result.status == "timeout":
            return ExecutionScore(0.0, "timeout")
        if result.kernel_restarted:
            return ExecutionScore(0.0, "timeout")
        after = kernel.fingerprint()
    except BackendUnavailableError:
        raise
    except KernelDiedError as exc:
        reason = str(exc).lower()
        return ExecutionScore(0.0, "memory" if "oom" in reason or "memory" in reason else "exit")
    except InfrastructureError:
        return ExecutionScore(0.0, "unreadable")  # it broke the kernel's answers (the helper, stdout, ...)
    predicted = changed_names(before, after)
    union = set(truth) | set(predicted)
    matched = {
        name
        for name in set(truth) & set(predicted)
        if not diff_fingerprints({name: truth[name]}, {name: predicted[name]})
    }
    variables = len(matched) / len(union) if union else 1.0
    produced, wanted = render_outputs(result.outputs), render_outputs(target.outputs)
    outputs = 1.0 if not produced.strip() and not wanted.strip() else score(produced, wanted).chrf
    return ExecutionScore((variables + outputs) / 2)
