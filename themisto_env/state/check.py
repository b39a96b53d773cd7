"""What a served state is checked against, and the report of how it was served.

A trajectory records, for each step, the namespace fingerprint and the working folder's digest after
it; the state before step k is checked against those of step k-1 (or an empty namespace where the step
starts in a fresh kernel). [`StateReport`][themisto_env.state.StateReport] says what was checked and met.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from themisto_env.data.trajectory import Trajectory
from themisto_env.sandbox.kernel.helper import FINGERPRINT_VERSION

StateCheck = Literal["verified", "mismatch", "unchecked"]
"""How a served state was checked: ``verified``, ``mismatch`` or ``unchecked``."""


def fresh_before(trajectory: Trajectory, step: int) -> bool:
    """Whether ``step`` starts in a fresh kernel: the first step, one the person restarted the kernel
    before, or one after a cell that wedged the kernel when built (it was restarted then)."""
    steps = trajectory.steps
    return step == 0 or steps[step].restarted_before or steps[step - 1].wedged


def expected_fingerprint(trajectory: Trajectory, step: int) -> dict[str, str] | None:
    """The recorded fingerprint of the namespace in which ``step`` starts (None where not recorded, or
    recorded by another version of the fingerprint)."""
    if trajectory.fingerprint_version != FINGERPRINT_VERSION:
        return None
    if fresh_before(trajectory, step):
        return {}
    return trajectory.steps[step - 1].fingerprint


def files_before(trajectory: Trajectory, step: int) -> str | None:
    """The content digest of the working folder in which ``step`` starts: the folder the replay started
    with, else what the step before left (a restart keeps the files, as on a person's disk). None where
    not recorded."""
    if trajectory.workdir_digest is None:
        return None
    return trajectory.workdir_digest if step == 0 else trajectory.steps[step - 1].files


def fault_text(error: Exception) -> str:
    """An infrastructure failure as a sample's fault: ``TypeName: message``."""
    return f"{type(error).__name__}: {error}"


def diff_fingerprints(expected: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    """What differs between a recorded and a live fingerprint, one line per name (empty: the same).

    Type and shape (or length) must match; content hashes are compared where both sides have one.
    """
    lines = [f"{name}: missing" for name in sorted(expected.keys() - actual.keys())]
    lines += [f"{name}: not recorded" for name in sorted(actual.keys() - expected.keys())]
    for name in sorted(expected.keys() & actual.keys()):
        want, got = expected[name].rsplit("|", 2), actual[name].rsplit("|", 2)
        if want[:2] != got[:2] or (want[2] and got[2] and want[2] != got[2]):
            lines.append(f"{name}: recorded {expected[name]}, live {actual[name]}")
    return lines


@dataclass
class StateReport:
    """How a state was served.

    Attributes:
        trajectory_id: The trajectory.
        step: The step about to run (the kernel is in the state before it).
        check: ``verified`` (the live fingerprint equals the recorded one), ``mismatch`` (it still
            differs after repair) or ``unchecked`` (nothing recorded to check against).
        route: How the state was reached (``forward``, ``snapshot``, ``fresh``, ``in place``).
        faults: Infrastructure failures met and recovered from on the way.
        differences: Where the live state differs from the recorded one (when ``mismatch``).
        refused_snapshots: Snapshots passed over because a kernel of another environment wrote them
            (``themisto kernel-env``): the state was replayed instead.
        served_by: How states are copied into the kernel: ``fork`` (a copy forked from the state's template),
            ``restore`` (a snapshot loaded into a started kernel), ``restore (not fork-safe: ...)`` (this
            state holds what a fork would share: an open file, a socket, a thread), ``restore (into a forked
            copy: ...)`` (a kernel forked from a template that makes no state templates, the state restored
            into it: docker's and bwrap's copies of model-written code).
    """

    trajectory_id: str
    step: int
    check: StateCheck = "unchecked"
    route: str = ""
    faults: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    refused_snapshots: list[str] = field(default_factory=list)
    served_by: str = ""

    def as_dict(self) -> dict[str, object]:
        """JSON-able form for ``info`` and result rows: what was checked and met, not the route taken
        (which depends on where the kernel happened to be, so the same seed and actions give the same
        ``info``, as gymnasium's checker requires)."""
        info: dict[str, object] = {"check": self.check, "faults": list(self.faults)}
        info["differences"] = self.differences[:20]
        if self.served_by:
            info["served_by"] = self.served_by
        if self.refused_snapshots:
            info["snapshots_refused"] = f"{len(self.refused_snapshots)} written in another kernel environment"
        return info


__all__ = [
    "StateCheck",
    "StateReport",
    "diff_fingerprints",
    "expected_fingerprint",
    "fault_text",
    "files_before",
    "fresh_before",
]
