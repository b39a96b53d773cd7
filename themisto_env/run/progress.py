"""A run's bookkeeping while rows come in: counts, the progress bar, and when to stop.

The bar is :class:`~themisto_env.progress.ProgressLine` on stderr (periodic lines when piped).

``fail_on_error`` (``--fail-on-error RATE``) stops the run with one line when more than that fraction of
the samples run so far have model errors, judged once :data:`FAIL_ON_ERROR_MIN_SAMPLES` samples (or all
the run's samples, if fewer) are done.
"""

from __future__ import annotations

from types import TracebackType

from themisto_env.progress import ProgressLine
from themisto_env.run.config import RunConfig
from themisto_env.run.plan import RunPlan
from themisto_env.run.results import ResultRow

FAIL_ON_ERROR_MIN_SAMPLES = 10
"""``fail_on_error`` is judged once this many samples are done (or all of a smaller run's)."""


class RunProgress:
    """Counts the rows of a run as they are written, shows them on a progress bar, and says when to stop.

    Use as a context manager (it owns the bar): ``with RunProgress(config, plan) as progress:`` then
    ``stop = progress.record(row)`` for each row written.

    Attributes:
        ran: Rows recorded by this run (a resume counts only its own).
        model_errors: Those of them with a ``model_error``.
        stop: Why the run stops (``fail_on_error`` exceeded), once it must; else None.
    """

    def __init__(self, config: RunConfig, plan: RunPlan, *, show: bool = True) -> None:
        self.config, self.planned = config, len(plan.wanted)
        self.ran, self.model_errors = 0, 0
        self.stop: str | None = None
        label = f"{config.agent}{f' {config.model}' if config.model else ''} on {config.task}"
        self._bar = ProgressLine(label, plan.total, completed=plan.done, show=show)

    def __enter__(self) -> RunProgress:
        self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._bar.__exit__(kind, error, trace)

    def record(self, row: ResultRow) -> str | None:
        """Count a row just written; return why the run stops now (``fail_on_error`` exceeded), or None."""
        self.ran += 1
        self._bar.advance()
        self.model_errors += bool(row.model_error)
        self.stop = self._too_many_errors(row)
        return self.stop

    def _too_many_errors(self, row: ResultRow) -> str | None:
        rate = self.config.fail_on_error
        if rate is None or not row.model_error:
            return None
        if self.ran < min(FAIL_ON_ERROR_MIN_SAMPLES, self.planned) or self.model_errors / self.ran <= rate:
            return None
        return (
            f"stopped: {self.model_errors} of {self.ran} samples failed in their model calls "
            f"({self.model_errors / self.ran:.0%} > --fail-on-error {rate:g}); last: {row.model_error}"
        )


__all__ = ["FAIL_ON_ERROR_MIN_SAMPLES", "RunProgress"]
