"""Recorded development sessions: what a person executed, in order, as read from a log or a notebook.

A [`Session`][themisto_env.data.Session] is one kernel's life in a notebook (JuNE groups episodes by ``kernel_id``); its
`RecordedExecution` items are the cell executions in the order they were
performed, with the outputs that were recorded at the time. These are the *inputs* of trajectory building: replaying a
session in a sandbox kernel adds runtime state and replayed outputs beside the recorded ones.

Sources:
    * JuNE event logs ([`themisto_env.data.june.read_sessions`][themisto_env.data.read_sessions]): full sessions with
    times.
    * Saved notebooks (`themisto_env.data.notebook.read_notebook_session`):
    partial sessions, code
      cells ordered by ``execution_count``, no times.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ExecutionStatus = Literal["ok", "error", "unknown"]
SessionOrigin = Literal["june", "notebook"]


class RecordedExecution(BaseModel):
    """One cell execution as a person performed it.

    Attributes:
        index: Position of this execution in its session (0-based, in the order performed).
        cell_id: The cell's id (JuNE ``cell_index``, 32 hex digits there; any string from other
            sources), or None when the source did not record it.
        source: The code that was executed.
        recorded_outputs: nbformat v4 output dicts recorded at the time (from the ``finished_execute``
            row, or the ``error`` row when no finish was recorded).
        status: ``error`` if an error output was recorded, ``ok`` if the execution finished without one,
            ``unknown`` if it never finished (the log has no ``finished_execute`` for it).
        duration_s: ``finished_execute.time - execute.time`` in seconds; None without a finish.
        time: When the execution started (the ``execute`` row's time); None for notebooks.
        finish_time: When it finished; None without a finish.
        restarted_before: The kernel was restarted between the previous execution and this one: the
            namespace is empty when this cell starts (a replay must restart its kernel here).
        interrupted: A ``kernel_interrupting`` event arrived while this execution was running.
        cell_deleted: The cell was deleted later in the session.
        cell_num: The cell's position in the notebook when it was executed (JuNE ``cell_num``).
        execution_count: The kernel's counter, where the source recorded it (notebooks).
        action_id: The ``execute`` row's ``action_id`` (None for notebooks).
        finish_action_id: The ``finished_execute`` row's ``action_id``, if any.
        session_id: The frontend session id of the ``execute`` row (JuNE ``session_id``).
    """

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    cell_id: str | None = None
    source: str
    recorded_outputs: list[dict[str, Any]] = Field(default_factory=list)
    status: ExecutionStatus = "unknown"
    duration_s: float | None = None
    time: datetime | None = None
    finish_time: datetime | None = None
    restarted_before: bool = False
    interrupted: bool = False
    cell_deleted: bool = False
    cell_num: float | None = None
    execution_count: int | None = None
    action_id: int | None = None
    finish_action_id: int | None = None
    session_id: str | None = None

    @property
    def error(self) -> dict[str, Any] | None:
        """The recorded error output, if the execution raised."""
        return next((o for o in self.recorded_outputs if o.get("output_type") == "error"), None)


class Session(BaseModel):
    """One kernel's recorded life in a notebook: the executions in the order performed.

    Attributes:
        key: The session key: the JuNE ``kernel_id`` (for notebooks, a key derived from the file).
        notebook_name: The notebook's name (the latest, if it was renamed during the session).
        user_id: Who worked in it (JuNE ``user_id``), if known.
        expert: JuNE's ``expert`` flag of the user.
        origin: ``june`` for event logs, ``notebook`` for saved ``.ipynb`` files.
        source_path: The file it was read from, if any.
        executions: Executions in the order performed.
        event_counts: Number of events of each kind (``execute``, ``delete``, ...; unknown kinds
            included). Empty for notebooks.
        deleted_cell_ids: Cells deleted during the session, in the order deleted.
        restarts: Number of ``kernel_restarting`` events.
        start_time: Time of the session's first event, if known.
        end_time: Time of its last event, if known.
    """

    model_config = ConfigDict(extra="forbid")

    key: str
    notebook_name: str | None = None
    user_id: str | None = None
    expert: bool = False
    origin: SessionOrigin = "june"
    source_path: str | None = None
    executions: list[RecordedExecution] = Field(default_factory=list)
    event_counts: dict[str, int] = Field(default_factory=dict)
    deleted_cell_ids: list[str] = Field(default_factory=list)
    restarts: int = 0
    start_time: datetime | None = None
    end_time: datetime | None = None

    @property
    def errors(self) -> list[RecordedExecution]:
        """Executions that raised."""
        return [e for e in self.executions if e.status == "error"]


__all__ = ["ExecutionStatus", "RecordedExecution", "Session", "SessionOrigin"]
