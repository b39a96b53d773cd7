"""Saved notebooks (``.ipynb``) as partial sessions.

A saved notebook keeps only the last execution of each cell, so it is a *partial* trajectory: its code
cells ordered by ``execution_count`` (cells never run are skipped, ties keep the notebook's order), the
saved outputs as recorded outputs, and no times, unless JupyterLab recorded cell timing
(``metadata.execution``), in which case start times and durations are filled in from it. Restarts cannot
be seen in a saved notebook.

A notebook saved without any execution count (tools such as ``nbstripout`` or some editors drop them)
is read in document order, every code cell once, with a one-line warning on the ``themisto_env.data.notebook``
logger. If it also holds no output at all, its outputs were cleared: the executions get status
``unknown`` (nothing was recorded to compare a replay with), not ``ok``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from themisto_env.data.limits import echo, load_json
from themisto_env.data.sessions import RecordedExecution, Session
from themisto_env.errors import DataError

_log = logging.getLogger(__name__)

_TIMING_START = "iopub.execute_input"
_TIMING_END = "shell.execute_reply"


def _timing(metadata: Any) -> tuple[datetime | None, datetime | None]:
    """A cell's recorded start and end in UTC (JupyterLab writes ``Z``; a time without a zone is taken as
    UTC, so that every time of a notebook can be compared with the others)."""
    execution = metadata.get("execution") if isinstance(metadata, dict) else None
    if not isinstance(execution, dict):
        return None, None
    times: list[datetime | None] = []
    for key in (_TIMING_START, _TIMING_END):
        value = execution.get(key)
        try:
            time = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
        except ValueError:
            time = None
        if time is not None:
            time = time.replace(tzinfo=UTC) if time.tzinfo is None else time.astimezone(UTC)
        times.append(time)
    return times[0], times[1]


def _read(file: Path) -> Any:
    """The notebook's nbformat 4 form, its JSON nesting checked first (nbformat recurses over it)."""
    import nbformat

    try:
        text = file.read_text(encoding="utf-8")
        raw = load_json(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"not a readable notebook ({echo(str(exc), 120)})", path=file) from None
    if not isinstance(raw, dict):
        raise DataError(f"not a notebook: a JSON {type(raw).__name__}, not an object", path=file)
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises NotJSONError, KeyError, ... for broken files
        raise DataError(f"not a readable notebook ({type(exc).__name__}: {echo(str(exc), 120)})", path=file) from None


def read_notebook_session(path: str | Path, *, key: str | None = None) -> Session:
    """Read a saved notebook as a partial session.

    Args:
        path: The ``.ipynb`` file (nbformat 4; older versions are converted).
        key: The session key; by default ``notebook:<file name>``.

    Returns:
        A session with ``origin="notebook"``: the executed code cells in ``execution_count`` order, each
        with its saved outputs and ``execution_count``; every code cell in document order when no cell
        has an execution count (logged as a warning).

    Raises:
        DataError: The file is missing, is not JSON, nests deeper than
            `MAX_DEPTH`, or is not a notebook (naming the cell and field).
    """
    file = Path(path)
    if not file.is_file():
        raise DataError("no such file", path=file)
    notebook = _read(file)
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        raise DataError("not a notebook: no list of cells", path=file, field="cells")
    for position, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise DataError(f"a cell is an object, got {type(cell).__name__}", path=file, row=position + 1)

    code_cells = [(position, cell) for position, cell in enumerate(cells) if cell.get("cell_type") == "code"]
    ran: list[tuple[int | None, int, dict[str, Any]]] = []
    for position, cell in code_cells:
        count = cell.get("execution_count")
        if count is None:
            continue
        if not isinstance(count, int) or isinstance(count, bool):
            raise DataError(
                f"expected an integer, got {echo(count)}", path=file, row=position + 1, field="execution_count"
            )
        ran.append((count, position, cell))
    ran.sort(key=lambda item: (item[0], item[1]))
    cleared = False
    if not ran and code_cells:
        ran = [(None, position, cell) for position, cell in code_cells]
        cleared = not any(cell.get("outputs") for _, cell in code_cells)
        _log.warning(
            "%s: no execution counts; reading its %d code cells in document order%s",
            file,
            len(code_cells),
            " (no outputs either: nothing to compare replays with)" if cleared else "",
        )

    executions = []
    for index, (count, position, cell) in enumerate(ran):
        raw_outputs = cell.get("outputs", [])
        if not isinstance(raw_outputs, list) or not all(isinstance(o, dict) for o in raw_outputs):
            raise DataError("expected a list of output objects", path=file, row=position + 1, field="outputs")
        outputs = [_plain(o) for o in raw_outputs]
        status = "error" if any(o.get("output_type") == "error" for o in outputs) else "ok"
        start, end = _timing(cell.get("metadata", {}))
        duration = (end - start).total_seconds() if start and end and end >= start else None
        try:
            execution = RecordedExecution(
                index=index,
                cell_id=cell.get("id"),
                source=cell.get("source", ""),
                recorded_outputs=outputs,
                status="unknown" if cleared else status,
                duration_s=duration,
                time=start,
                finish_time=end if duration is not None else None,
                cell_num=float(position),
                execution_count=count,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or None
            raise DataError(first["msg"], path=file, row=position + 1, field=field) from None
        executions.append(execution)
    times = [e.time for e in executions if e.time is not None]
    return Session(
        key=key or f"notebook:{file.name}",
        notebook_name=file.name,
        origin="notebook",
        source_path=str(file),
        executions=executions,
        start_time=min(times) if times else None,
        end_time=max(times) if times else None,
    )


def _plain(value: Any) -> Any:
    """nbformat's NotebookNode (a dict subclass) as plain dicts and lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


__all__ = ["read_notebook_session"]
