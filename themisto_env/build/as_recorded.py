"""Running a recorded cell as it was recorded: a cell the person interrupted is interrupted at its recorded time.

The build records each cell with `run_recorded`; a served state's forward replay runs built steps through it
too (`themisto_env.replay.recorded_cells.replay_step`, which checks each against its build).
"""

from __future__ import annotations

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
    `themisto_env.build.session_replay.CellLimit`)."""
    limit = limit_s or kernel.limits.timeout_s
    timeout = interrupt_after(duration_s, limit) if interrupted else limit
    return kernel.execute(source, timeout_s=timeout, fingerprint=fingerprint)


__all__ = ["interrupt_after", "run_recorded"]
