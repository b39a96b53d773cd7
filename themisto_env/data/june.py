"""JuNE event logs: read, validate, group into sessions, write.

JuNE (JetBrains Research's notebook-execution dataset) is an event log, one row per user or kernel
event, with the columns in :data:`JUNE_COLUMNS`. This module reads such logs from CSV, Parquet or JSON
Lines (``.csv``, ``.csv.gz``, ``.parquet``, ``.jsonl``, ``.jsonl.gz``, ``.ndjson``), validates every row
into a :class:`JuneEvent` (a malformed row raises :class:`~themisto_env.errors.DataError` naming the
file, the 1-based data row and the field), groups the events into :class:`~themisto_env.data.sessions.Session`
objects by ``kernel_id`` and writes events back in the same formats.

Every event kind is kept; only these matter for replay:

* ``execute`` / ``finished_execute``: one execution, paired by cell (FIFO per ``cell_index``); the
  execution time is the difference of their times, the outputs come from the finish row.
* ``error``: the error output of the running execution (used when the finish row has none).
* ``kernel_restarting``: the namespace is gone; the next execution is flagged ``restarted_before`` and
  executions still running are abandoned (they never finish).
* ``kernel_interrupting``: the running execution is flagged ``interrupted``.
* ``delete``: the cell is noted in ``Session.deleted_cell_ids`` and its executions flagged.
* ``notebook_renamed``: the session's ``notebook_name`` follows the rename.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from themisto_env.data.sessions import RecordedExecution, Session
from themisto_env.errors import DataError

JUNE_COLUMNS: tuple[str, ...] = (
    "action_id",
    "time",
    "session_id",
    "kernel_id",
    "notebook_name",
    "event",
    "cell_index",
    "cell_num",
    "cell_type",
    "cell_source",
    "cell_output",
    "user_id",
    "expert",
)
"""The JuNE columns, in JuNE's order."""

REQUIRED_COLUMNS: tuple[str, ...] = ("action_id", "time", "kernel_id", "event")
"""Columns a log must have; the others may be absent (read as null), except :data:`EVENT_COLUMNS`."""

EVENT_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "execute": (("cell_source", "the executed code, which replay runs and next-cell samples predict"),),
    "finished_execute": (("cell_output", "the outputs the person saw, which replays are compared with"),),
}
"""Columns the rows of an event kind must have (a value may be null, the column may not be absent), and
why: a log without them would build silently with every source, or every recorded output, empty."""

KNOWN_EVENTS: frozenset[str] = frozenset(
    {
        "execute",
        "finished_execute",
        "create",
        "delete",
        "rendered",
        "error",
        "save_notebook",
        "kernel_restarting",
        "kernel_interrupting",
        "notebook_renamed",
        "move",
        "cut",
        "paste",
    }
)
"""Event kinds seen in JuNE. Others are accepted too (counted, ignored for replay)."""

EventFormat = Literal["csv", "parquet", "jsonl"]

TIME_FORMAT_EXAMPLE = "2023-05-06 10:32:26.282"

_SUFFIXES: dict[str, EventFormat] = {
    ".csv": "csv",
    ".csv.gz": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
    ".ndjson": "jsonl",
    ".ndjson.gz": "jsonl",
}


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


class JuneEvent(BaseModel):
    """One row of a JuNE event log.

    Attributes:
        action_id: Row id, increasing in the order events happened.
        time: When the event happened (JuNE writes ``2023-05-06 10:32:26.282``).
        session_id: The frontend session.
        kernel_id: The kernel: the session key.
        notebook_name: The notebook's file name.
        event: The event kind (:data:`KNOWN_EVENTS`, or any other string).
        cell_index: The cell's id (32 hex digits in JuNE), null for notebook-level events.
        cell_num: The cell's position in the notebook.
        cell_type: ``code``, ``markdown`` or ``raw``.
        cell_source: The cell's source; for ``save_notebook`` the notebook's cells as JSON.
        cell_output: nbformat v4 output dicts (a JSON string in CSV and Parquet).
        user_id: Who acted.
        expert: Whether the user is an expert (JuNE's flag).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    action_id: int
    time: datetime
    session_id: str | None = None
    kernel_id: str
    notebook_name: str | None = None
    event: str
    cell_index: str | None = None
    cell_num: float | None = None
    cell_type: str | None = None
    cell_source: str | None = None
    cell_output: list[dict[str, Any]] | None = None
    user_id: str | None = None
    expert: bool = False

    @field_validator("action_id", mode="before")
    @classmethod
    def _action_id(cls, value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            text = value.strip()
            try:
                return int(text)
            except ValueError:
                try:
                    number = float(text)
                except ValueError:
                    number = math.nan
                if number.is_integer():
                    return int(number)
        raise ValueError(f"expected an integer, got {value!r}")

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, value: Any) -> datetime:
        if isinstance(value, datetime):
            return value
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.strip())
            except ValueError:
                pass
        raise ValueError(f"expected a time like {TIME_FORMAT_EXAMPLE!r}, got {value!r}")

    @field_validator("kernel_id", "event", mode="before")
    @classmethod
    def _required_text(cls, value: Any) -> str:
        if _is_null(value):
            raise ValueError("must not be empty")
        return str(value)

    @field_validator("session_id", "notebook_name", "cell_index", "cell_type", "cell_source", "user_id", mode="before")
    @classmethod
    def _optional_text(cls, value: Any) -> str | None:
        if _is_null(value):
            return None
        return value if isinstance(value, str) else str(value)

    @field_validator("cell_num", mode="before")
    @classmethod
    def _cell_num(cls, value: Any) -> float | None:
        if _is_null(value):
            return None
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None

    @field_validator("cell_output", mode="before")
    @classmethod
    def _cell_output(cls, value: Any) -> list[dict[str, Any]] | None:
        if _is_null(value):
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(o, dict) for o in value):
            raise ValueError("expected a JSON list of nbformat output objects")
        return value

    @field_validator("expert", mode="before")
    @classmethod
    def _expert(cls, value: Any) -> bool:
        if _is_null(value):
            return False
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _BOOL_TEXT:
            return _BOOL_TEXT[value.strip().lower()]
        raise ValueError(f"expected a boolean, got {value!r}")

    def time_text(self) -> str:
        """The time as JuNE writes it (milliseconds, unless the time has finer digits)."""
        return format_time(self.time)

    def to_row(self, *, output_as_text: bool) -> dict[str, Any]:
        """The event as a row of JuNE columns.

        Args:
            output_as_text: Write ``cell_output`` as a JSON string (CSV, Parquet) rather than a list.

        Returns:
            A dict with the keys of :data:`JUNE_COLUMNS`, in that order.
        """
        row = self.model_dump()
        row["time"] = self.time_text()
        if output_as_text and self.cell_output is not None:
            row["cell_output"] = json.dumps(self.cell_output, ensure_ascii=False)
        return {name: row[name] for name in JUNE_COLUMNS}


_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def format_time(value: datetime) -> str:
    """Format a time as JuNE does: ``2023-05-06 10:32:26.282``.

    Args:
        value: The time.

    Returns:
        The text; microseconds are kept when they are not whole milliseconds.
    """
    text = value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return text[:-3] if value.microsecond % 1000 == 0 else text


def event_format(path: str | Path) -> EventFormat:
    """The format of an event log, from its file name's suffix.

    Args:
        path: The file.

    Returns:
        ``csv``, ``parquet`` or ``jsonl``.

    Raises:
        DataError: The suffix is not one of the supported ones.
    """
    name = Path(path).name.lower()
    for suffix, fmt in sorted(_SUFFIXES.items(), key=lambda item: -len(item[0])):
        if name.endswith(suffix):
            return fmt
    raise DataError(f"unknown event-log format; expected one of {', '.join(sorted(_SUFFIXES))}", path=path)


def _open_text(path: Path, mode: Literal["r", "w"]) -> io.TextIOBase:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8", newline="")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8", newline="")


def _event(raw: dict[str, Any], path: Path, row: int) -> JuneEvent:
    values = {name: raw.get(name) for name in JUNE_COLUMNS}
    for name in REQUIRED_COLUMNS:
        if name not in raw:
            raise DataError("missing column", path=path, row=row, field=name)
    for name, why in EVENT_COLUMNS.get(str(raw.get("event")), ()):
        if name not in raw:
            raise DataError(f"missing column: {raw['event']} rows need {why}", path=path, row=row, field=name)
    try:
        return JuneEvent.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else None
        message = first["msg"].removeprefix("Value error, ")
        raise DataError(message, path=path, row=row, field=field) from None


def _check_header(columns: Iterable[str], path: Path) -> None:
    present = set(columns)
    for name in REQUIRED_COLUMNS:
        if name not in present:
            raise DataError(
                f"missing column (the header has: {', '.join(present) or 'nothing'})", path=path, field=name
            )


def _iter_csv(path: Path) -> Iterator[JuneEvent]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with _open_text(path, "r") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None:
            raise DataError("empty file: no header row", path=path)
        _check_header(reader.fieldnames, path)
        for row, raw in enumerate(reader, start=1):
            if None in raw:
                raise DataError("more values than columns", path=path, row=row)
            yield _event(raw, path, row)


def _iter_jsonl(path: Path) -> Iterator[JuneEvent]:
    with _open_text(path, "r") as handle:
        for row, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"not valid JSON ({exc.msg} at char {exc.pos})", path=path, row=row) from None
            if not isinstance(raw, dict):
                raise DataError(f"expected a JSON object, got {type(raw).__name__}", path=path, row=row)
            yield _event(raw, path, row)


def _iter_parquet(path: Path) -> Iterator[JuneEvent]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise DataError(f"not a readable Parquet file ({exc})", path=path) from None
    _check_header(parquet.schema_arrow.names, path)
    row = 0
    for batch in parquet.iter_batches(batch_size=2048):
        for raw in batch.to_pylist():
            row += 1
            yield _event(raw, path, row)


def iter_events(path: str | Path) -> Iterator[JuneEvent]:
    """Stream the events of a JuNE log, validating each row.

    Args:
        path: A ``.csv``, ``.parquet`` or ``.jsonl`` file (``.csv.gz`` and ``.jsonl.gz`` too).

    Yields:
        The events in file order.

    Raises:
        DataError: The file is missing or malformed; the message names the file, the 1-based data row
            and the field.
    """
    file = Path(path)
    fmt = event_format(file)
    if not file.is_file():
        raise DataError("no such file", path=file)
    readers = {"csv": _iter_csv, "jsonl": _iter_jsonl, "parquet": _iter_parquet}
    try:
        yield from readers[fmt](file)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, csv.Error) as exc:
        raise DataError(f"cannot be read as {fmt} ({exc})", path=file) from None


def read_events(path: str | Path) -> list[JuneEvent]:
    """Read all the events of a JuNE log (see :func:`iter_events`).

    Args:
        path: The log file.

    Returns:
        The events in file order.
    """
    return list(iter_events(path))


def write_events(path: str | Path, events: Iterable[JuneEvent]) -> int:
    """Write events as a JuNE log; the format follows the suffix, as for reading.

    CSV and Parquet hold ``cell_output`` as a JSON string (as JuNE does); JSON Lines holds it as a list.

    Args:
        path: The file to write (parents are created).
        events: The events, in the order to write.

    Returns:
        The number of events written.
    """
    file = Path(path)
    fmt = event_format(file)
    file.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [event.to_row(output_as_text=True) for event in events]
        schema = pa.schema(
            [
                (
                    name,
                    pa.int64()
                    if name == "action_id"
                    else pa.float64()
                    if name == "cell_num"
                    else pa.bool_()
                    if name == "expert"
                    else pa.string(),
                )
                for name in JUNE_COLUMNS
            ]
        )
        table = pa.Table.from_pylist(rows, schema=schema)
        pq.write_table(table, file)
        return len(rows)
    with _open_text(file, "w") as handle:
        if fmt == "csv":
            writer = csv.DictWriter(handle, fieldnames=list(JUNE_COLUMNS), lineterminator="\n")
            writer.writeheader()
            for event in events:
                writer.writerow(event.to_row(output_as_text=True))
                count += 1
        else:
            for event in events:
                handle.write(json.dumps(event.to_row(output_as_text=False), ensure_ascii=False) + "\n")
                count += 1
    return count


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
    order their kernels first appear.

    Args:
        events: Events of one or more kernels.
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
    """Read a JuNE log and group it into sessions (see :func:`sessions_from_events`).

    Args:
        path: A ``.csv``, ``.parquet`` or ``.jsonl`` log (``.gz`` variants of CSV and JSON Lines too).

    Returns:
        One session per ``kernel_id``, in order of first appearance.

    Raises:
        DataError: The file is missing or malformed.
    """
    return sessions_from_events(iter_events(path), source_path=path)


__all__ = [
    "EVENT_COLUMNS",
    "JUNE_COLUMNS",
    "KNOWN_EVENTS",
    "REQUIRED_COLUMNS",
    "EventFormat",
    "JuneEvent",
    "event_format",
    "format_time",
    "iter_events",
    "read_events",
    "read_sessions",
    "sessions_from_events",
    "write_events",
]
