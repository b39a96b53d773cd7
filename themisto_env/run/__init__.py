"""Evaluation runs: an agent over a task's samples, into results.jsonl and summary.json, and what reads them.

Owns the run's config (``config``), [`run`][themisto_env.run.run] (``runner``) and its parts: the plan (``plan``: limit,
resume, episodes), a trajectory's rollout (``rollout``), a sample's row (``rows``), the executors by name
(``executors``: serial, processes, concurrent, ray), the bookkeeping (``tally``); the results model and
files (``results``: [`ResultRow`][themisto_env.run.ResultRow], what every reader reads) and the summary (``summary``);
and the
readers: the report (``report``), the HTML view (``view``) and the comparison of two runs
(``compare``). ``themisto run`` is this package. Names are re-exported lazily: importing this package
imports none of its modules.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
