"""A run's bookkeeping while rows come in: counts, the progress bar, and when to stop.

The bar is [`ProgressLine`][themisto_env.progress.ProgressLine] on stderr (periodic lines when piped).

``fail_on_error`` (``--fail-on-error RATE``) stops the run with one line when more than that fraction of
the samples run so far have model errors, judged once `FAIL_ON_ERROR_MIN_SAMPLES` samples (or all
the run's samples, if fewer) are done, and once more when the run ends (`RunProgress.finish`).
A run that scored nothing (`nothing_scored`) makes ``themisto run`` exit non-zero too.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

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

    def finish(self) -> str | None:
        """Judge the run once its rows are all in: why it failed (more than ``fail_on_error`` of its samples
        had model errors, however few it ran), or None. A run stopped early keeps its first reason."""
        if self.stop is None and self.ran and self._rate_exceeded(judged=self.ran):
            rate = self.config.fail_on_error
            self.stop = (
                f"{self.model_errors} of {self.ran} samples failed in their model calls "
                f"({self.model_errors / self.ran:.0%} > --fail-on-error {rate:g}); see model_error in results.jsonl"
            )
        return self.stop

    def _rate_exceeded(self, judged: int) -> bool:
        rate = self.config.fail_on_error
        return rate is not None and self.ran >= judged and self.model_errors / self.ran > rate

    def _too_many_errors(self, row: ResultRow) -> str | None:
        if not row.model_error or not self._rate_exceeded(judged=min(FAIL_ON_ERROR_MIN_SAMPLES, self.planned)):
            return None
        return (
            f"stopped: {self.model_errors} of {self.ran} samples failed in their model calls "
            f"({self.model_errors / self.ran:.0%} > --fail-on-error {self.config.fail_on_error:g}); "
            f"last: {row.model_error}"
        )


def nothing_scored(summary: Mapping[str, Any]) -> str | None:
    """Why a run's summary is a failure although the run ended: no sample of it was scored (every model
    call failed, every episode hit an infrastructure failure, ...); None when some sample was. ``themisto
    run`` exits non-zero with this line."""
    if summary.get("samples"):
        return None
    causes = {
        "model errors": summary.get("model_errors", 0),
        "infrastructure failures": summary.get("infrastructure_failures", 0),
        "state mismatches": summary.get("state_mismatches", 0),
    }
    why = ", ".join(f"{n} {cause}" for cause, n in causes.items() if n) or "no sample ran"
    return f"nothing was scored ({why}); see results.jsonl, and run again to retry the failed samples"


__all__ = ["FAIL_ON_ERROR_MIN_SAMPLES", "RunProgress", "nothing_scored"]
