"""What serving a state and calling a tool came to, as the record, the score and the bridges read it:
`ToolOutcome`, `not_served` and `state_mismatch` (the state server produces them; the
episode's record and the scorer read them without importing the server)."""

from __future__ import annotations

from dataclasses import dataclass

from themisto_env.env.tools import ToolResult
from themisto_env.state.check import StateReport

__all__ = ["ToolOutcome", "not_served", "state_mismatch"]


def not_served() -> dict[str, object]:
    """``info["state"]`` of a sample whose state is not served yet (nothing live was shown, nothing checked)."""
    return {"check": "not served", "faults": [], "differences": []}


def state_mismatch(report: StateReport | None) -> str | None:
    """How a served state differs from the recording (the ``state_mismatch`` a score takes), or None."""
    if report is None or report.check != "mismatch":
        return None
    return "; ".join(report.differences[:10]) or "the state differs"


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call on a served state came to.

    Attributes:
        result: The tool's result; None when the machinery failed and the call did not run.
        faults: The infrastructure failures met on the way, in order (serving the state, the call, the
            recovery after it): the sample's faults.
    """

    result: ToolResult | None
    faults: tuple[str, ...] = ()

    @property
    def error(self) -> str | None:
        """Why the call did not run (the step's ``infrastructure_error``), or None when it ran."""
        return self.faults[-1] if self.result is None and self.faults else None
