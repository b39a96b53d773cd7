"""Replaying a built step checked against its build.

The builder records with `themisto_env.build.as_recorded.run_recorded`;
`themisto_env.state.kernel.TrajectoryKernel` replays with `replay_step`, which raises
[`ReplayDivergedError`][themisto_env.errors.ReplayDivergedError] where a cell ends otherwise than when it was built.
"""

from __future__ import annotations

from themisto_env.build.as_recorded import run_recorded
from themisto_env.data.trajectory import Step
from themisto_env.errors import ReplayDivergedError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.models import ExecutionResult


def replay_step(kernel: KernelLike, step: Step, *, fingerprint: bool = False) -> ExecutionResult:
    """Replay a built step and check that it ends as it did when it was built.

    Raises:
        ReplayDivergedError: It timed out, needed a restart, or raised where the build did not (or the
            other way round): the state after it cannot be the recorded one.
        InfrastructureError: The kernel failed.
    """
    result = run_recorded(  # under the env kernel's own limit (a cell past it is routed round by a snapshot)
        kernel, step.source, interrupted=step.interrupted, duration_s=step.recorded_duration_s, fingerprint=fingerprint
    )
    if result.kernel_restarted != step.wedged or result.status != step.status:
        how = "needed a kernel restart" if result.kernel_restarted else f"ended {result.status!r}"
        built = "needed a restart" if step.wedged else f"ended {step.status!r}"
        raise ReplayDivergedError(f"step {step.index} {how} on replay; when built it {built}")
    return result


__all__ = ["replay_step"]
