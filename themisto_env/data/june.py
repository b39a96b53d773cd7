"""JuNE event logs grouped into sessions.

JuNE (JetBrains Research's notebook-execution dataset) is an event log, one row per user or kernel event.
Its rows are read and validated in `themisto_env.data.june_events` and `themisto_env.data.june_files`; this
module groups them into [`Session`][themisto_env.data.Session] objects by ``kernel_id``, pairing ``execute``
with ``finished_execute`` rows per cell and following restarts, interrupts, deletions and renames
(`sessions_from_events` says how).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from themisto_env.data.june_events import JuneEvent
from themisto_env.data.june_files import iter_events
from themisto_env.data.sessions import RecordedExecution, Session


class _Running:
    """An execution whose finish has not been seen yet."""

    def __init__(self, execution: dict[str, Any]) -> None:
        self.execution = execution
        self.error_outputs: list[dict[str, Any]] = []


def _session_from_events(key: str, events: list[JuneEvent], source_path: str | None) -> Session:
    executions: list[dict[str, Any]] = []
    running: list[_Running] = []
    counts: Counter[str] = Counter()
    deleted: list[str] = []
    restart_pending = False
    restarts = 0
    notebook_name: str | None = None
    user_id: str | None = None
    expert = False

    def find(cell_id: str | None) -> _Running | None:
        if cell_id is not None:
            match = next((r for r in running if r.execution["cell_id"] == cell_id), None)
            if match is not None:
                return match
        return running[0] if running else None

    for event in events:
        counts[event.event] += 1
        notebook_name = event.notebook_name or notebook_name
        user_id = user_id or event.user_id
        expert = expert or event.expert
        kind = event.event
        if kind == "execute":
            execution = {
                "index": len(executions),
                "cell_id": event.cell_index,
                "source": event.cell_source or "",
                "time": event.time,
                "restarted_before": restart_pending,
                "cell_num": event.cell_num,
                "action_id": event.action_id,
                "session_id": event.session_id,
            }
            restart_pending = False
            executions.append(execution)
            running.append(_Running(execution))
        elif kind == "finished_execute":
            match = find(event.cell_index)
            if match is None:
                continue
            running.remove(match)
            outputs = list(event.cell_output or [])
            if match.error_outputs and not any(o.get("output_type") == "error" for o in outputs):
                outputs.extend(match.error_outputs)
            execution = match.execution
            execution["recorded_outputs"] = outputs
            execution["finish_time"] = event.time
            execution["finish_action_id"] = event.action_id
            seconds = (event.time - execution["time"]).total_seconds()
            execution["duration_s"] = seconds if seconds >= 0 else None
            has_error = any(o.get("output_type") == "error" for o in outputs)
            execution["status"] = "error" if has_error else "ok"
        elif kind == "error":
            match = find(event.cell_index)
            if match is None:
                continue
            errors = [o for o in event.cell_output or [] if o.get("output_type") == "error"]
            match.error_outputs = errors or list(event.cell_output or [])
            match.execution["status"] = "error"
            match.execution.setdefault("recorded_outputs", list(match.error_outputs))
        elif kind == "kernel_restarting":
            restarts += 1
            restart_pending = True
            running.clear()
        elif kind == "kernel_interrupting":
            if running:
                running[0].execution["interrupted"] = True
        elif kind == "delete" and event.cell_index is not None:
            deleted.append(event.cell_index)

    deleted_set = set(deleted)
    for execution in executions:
        execution["cell_deleted"] = execution["cell_id"] in deleted_set
    return Session(
        key=key,
        notebook_name=notebook_name,
        user_id=user_id,
        expert=expert,
        origin="june",
        source_path=source_path,
        executions=[RecordedExecution.model_validate(e) for e in executions],
        event_counts=dict(sorted(counts.items())),
        deleted_cell_ids=deleted,
        restarts=restarts,
        start_time=events[0].time if events else None,
        end_time=events[-1].time if events else None,
    )


def sessions_from_events(events: Iterable[JuneEvent], *, source_path: str | Path | None = None) -> list[Session]:
    """Group events into sessions by ``kernel_id`` and pair executions with their finishes.

    Within a session, events are ordered by ``action_id`` (file order breaks ties). Sessions come in the
    order their kernels first appear. Every event kind is kept; these matter for replay:

    - ``execute`` / ``finished_execute``: one execution, paired by cell (first in, first out per
      ``cell_index``); its time is the difference of theirs, its outputs the finish row's.
    - ``error``: the running execution's error output (used when the finish row has none).
    - ``kernel_restarting``: the next execution is flagged ``restarted_before``; running ones are abandoned.
    - ``kernel_interrupting``: the running execution is flagged ``interrupted``.
    - ``delete``: the cell is noted in ``Session.deleted_cell_ids`` and its executions flagged.
    - ``notebook_renamed``: the session's ``notebook_name`` follows.

    Args:
        events: Events of one or more kernels, their times all with a zone or all without
            (`themisto_env.data.june_files.iter_events` checks a log's).
        source_path: The file they came from, kept on each session.

    Returns:
        One session per kernel.
    """
    groups: dict[str, list[tuple[int, int, JuneEvent]]] = {}
    for position, event in enumerate(events):
        groups.setdefault(event.kernel_id, []).append((event.action_id, position, event))
    source = str(source_path) if source_path is not None else None
    return [
        _session_from_events(key, [e for _, _, e in sorted(items, key=lambda t: (t[0], t[1]))], source)
        for key, items in groups.items()
    ]


def read_sessions(path: str | Path) -> list[Session]:
    """Read a JuNE log and group it into sessions (see `sessions_from_events`).

    Args:
        path: A ``.csv``, ``.parquet`` or ``.jsonl`` log (``.gz`` variants of CSV and JSON Lines too).

    Returns:
        One session per ``kernel_id``, in order of first appearance.

    Raises:
        DataError: The file is missing or malformed.
    """
    return sessions_from_events(iter_events(path), source_path=path)


__all__ = ["read_sessions", "sessions_from_events"]
