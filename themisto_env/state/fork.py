"""The fork route of a `TrajectoryKernel`: a state's copy forked from
its state template instead of a restore, and the spares of the states it will serve next.

`ForkedStates` is the part of `TrajectoryKernel` that asks the kernel template (its ``template``) for copies: a
snapshot route forks a copy of the snapshot's state template where one runs (or where no kernel is at hand),
`ForkedStates.copy_source` names the state template a state would be copied from, and
`ForkedStates.prepare` has a spare of it forked before the state is asked for (an env's next sample).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from themisto_env.data.trajectory import Trajectory
from themisto_env.errors import BackendUnavailableError, InfrastructureError, KernelStartError, TemplateGoneError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.state.check import StateReport, fresh_before

if TYPE_CHECKING:
    from themisto_env.sandbox.template.core import KernelTemplate

__all__ = ["ForkedStates"]

log = logging.getLogger("themisto_env")


class ForkedStates:
    """The fork route of a `TrajectoryKernel` (its base class: the attributes below are the owner's)."""

    template: Callable[[], KernelTemplate] | None
    _forking_refused: str | None
    _kernel: KernelLike | None
    _report: StateReport | None

    def _discard(self, kernel: KernelLike) -> None: ...

    def _forward_from(self, trajectory: Trajectory, step: int) -> int | None: ...

    def _nearest_snapshot(self, trajectory: Trajectory, step: int) -> int | None: ...

    def _template(self) -> KernelTemplate | None:
        """The template to fork from, or None (none given, or given up: it could not start or is unsafe)."""
        if self.template is None or self._forking_refused is not None:
            return None
        try:
            template = self.template()
        except BackendUnavailableError:
            raise
        except InfrastructureError as exc:
            self._forking_refused = f"the kernel template could not start: {exc}"
        else:
            if not template.hazards:
                return template
            self._forking_refused = f"the kernel template is not safe to fork: {'; '.join(template.hazards)}"
        log.warning("%s; kernels are started and states restored instead", self._forking_refused)
        return None

    def _fork_state(self, digest: str) -> dict[str, str] | None:
        """Replace the kernel by a copy forked from the state template of ``digest``; return the copy's
        fingerprint, or None where the state is not forked (no template; the state is unsafe to fork: an
        open file or socket, a thread; or a kernel is at hand and the state has no template yet, where a
        restore costs less than loading one: the caller restores it). A snapshot the template
        cannot load raises as a restore would."""
        template = self._template()
        if template is None:
            return None
        if self._kernel is not None and self._kernel.is_alive() and not template.worth_forking(digest):
            return None  # no template of this state yet: a restore into the kernel at hand costs less
        with contextlib.ExitStack() as stack:
            try:
                state = stack.enter_context(template.claim(digest))  # not closed by another thread meanwhile
            except (TemplateGoneError, KernelStartError):
                return None  # the template is replaced at the next call; this state is restored
            if state.hazards:
                if self._report is not None:
                    self._report.served_by = f"restore (not fork-safe: {'; '.join(state.hazards)})"
                return None
            copy = state.kernel()
        old, self._kernel = self._kernel, copy
        if old is not None:
            self._discard(old)
        if state.fingerprint is None:  # every copy starts in the same state: the first one's holds for all
            state.fingerprint = copy.introspect.fingerprint()
        return dict(state.fingerprint)

    def copy_source(self, trajectory: Trajectory, step: int) -> tuple[KernelTemplate, str] | None:
        """The template and the snapshot a copy of the state before ``step`` is forked from when this owner
        serves it by the snapshot route (the nearest trusted whole snapshot's state template); None where
        it would not fork one (no template, a state served from a fresh kernel, no usable snapshot)."""
        template = self._template()
        if template is None or fresh_before(trajectory, step):
            return None
        found = self._nearest_snapshot(trajectory, step)
        digest = None if found is None else trajectory.steps[found].snapshot
        return None if digest is None else (template, digest)

    def prepare(self, trajectory: Trajectory, step: int) -> bool:
        """Say that the state before ``step`` is the one this owner will serve next (an env's next sample):
        where it would be served by a copy of a state template that runs already, a spare of it is forked now,
        in the background, and handed out when the state is served. Returns whether one was asked for.

        Nothing is prepared where the kernel will replay forward to it instead (the kernel is before an earlier
        step of the trajectory and the cells in between cost less), or where no template of that state runs
        (making one costs what a restore costs: the serve does it when it must)."""
        if self._kernel is not None and self._forward_from(trajectory, step) is not None:
            return False
        source = self.copy_source(trajectory, step)
        if source is None or not source[0].worth_forking(source[1]):
            return False
        template, digest = source
        try:
            with template.claim(digest) as state:
                if state.hazards:
                    return False
                state.prepare()
        except InfrastructureError:
            return False
        return True
