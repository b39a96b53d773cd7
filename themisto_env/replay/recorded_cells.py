"""Running a recorded cell as it was recorded, and replaying a built step checked against its build.

The builder records with `run_recorded`; `TrajectoryKernel`
replays with `replay_step`, which raises [`ReplayDivergedError`][themisto_env.errors.ReplayDivergedError] where a
cell ends otherwise than when it was built.
"""

from __future__ import annotations

from themisto_env.data.trajectory import Step
from themisto_env.errors import ReplayDivergedError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.models import ExecutionResult


def interrupt_after(duration_s: float | None, timeout_s: float) -> float:
    """The timeout that reproduces a cell the person interrupted: its recorded time plus a second."""
    return min((duration_s or 5.0) + 1.0, timeout_s)


def run_recorded(
    kernel: KernelLike,
    source: str,
    *,
    interrupted: bool,
    duration_s: float | None,
    fingerprint: bool = False,
    limit_s: float | None = None,
) -> ExecutionResult:
    """Run one recorded cell as it was recorded: a cell the person interrupted is interrupted at the
    recorded time (plus a second) rather than left to run to the limit. With ``fingerprint`` the
    namespace fingerprint after it comes back in the same request. ``limit_s`` is the cell's limit
    (default: the kernel's ``limits.timeout_s``; a build gives each cell its own, see
    `themisto_env.replay.session_replay.CellLimit`)."""
    limit = limit_s or kernel.limits.timeout_s
    timeout = interrupt_after(duration_s, limit) if interrupted else limit
    return kernel.execute(source, timeout_s=timeout, fingerprint=fingerprint)


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


__all__ = ["interrupt_after", "replay_step", "run_recorded"]
