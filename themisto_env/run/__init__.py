"""Evaluation runs: an agent over a task's samples, into results.jsonl and summary.json, and what reads them.

Owns the run's config (``config``), :func:`run` (``runner``) and its parts: the plan (``plan``: limit,
resume, episodes), the one episode loop (``episode``), a sample's row (``rows``), the executors by name
(``executors``: serial, processes, concurrent, ray), the bookkeeping (``progress``); the results model and
files (``results``: :class:`ResultRow`, what every reader reads) and the summary (``summary``); and the
readers: the report (``report``), the HTML view (``view``, ``view_page``) and the comparison of two runs
(``compare``). ``themisto run`` is this package. Names are re-exported lazily: importing this package
imports none of its modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports

if TYPE_CHECKING:
    from themisto_env.run.compare import compare_runs
    from themisto_env.run.config import RunConfig, load_run_config
    from themisto_env.run.report import write_report
    from themisto_env.run.results import ResultRow, read_results
    from themisto_env.run.runner import run
    from themisto_env.run.view import write_view

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.run.compare": ("compare_runs",),
        "themisto_env.run.config": ("RunConfig", "load_run_config"),
        "themisto_env.run.report": ("write_report",),
        "themisto_env.run.results": ("ResultRow", "read_results"),
        "themisto_env.run.runner": ("run",),
        "themisto_env.run.view": ("write_view",),
    },
)

__all__ = [
    "ResultRow",
    "RunConfig",
    "compare_runs",
    "load_run_config",
    "read_results",
    "run",
    "write_report",
    "write_view",
]
