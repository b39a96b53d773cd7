"""JuNE event rows: the columns and `JuneEvent`, one validated row.

A malformed value raises pydantic's ``ValueError`` here; the readers in
`themisto_env.data.june_files` turn it into a [`DataError`][themisto_env.errors.DataError] naming the
file, the row and the field.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from themisto_env.data.limits import MAX_DEPTH, depth_exceeds, echo, load_json

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
"""Columns a log must have; the others may be absent (read as null), except `EVENT_COLUMNS`."""

EVENT_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "execute": (("cell_source", "the executed code, which replay runs and next-cell samples predict"),),
    "finished_execute": (("cell_output", "the outputs the person saw, which replays are compared with"),),
}
"""Columns the rows of an event kind must have (a value may be null, the column may not be absent), and
why: a log without them would build silently with every source, or every recorded output, empty."""

TIME_FORMAT_EXAMPLE = "2023-05-06 10:32:26.282"


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
        event: The event kind (``execute``, ``finished_execute``, ``error``, ``kernel_restarting``,
            ``delete``, ...: any string is kept, the kinds replay uses are in `themisto_env.data.june`).
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
        raise ValueError(f"expected an integer, got {echo(value)}")

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
        raise ValueError(f"expected a time like {TIME_FORMAT_EXAMPLE!r}, got {echo(value)}")

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
            raise ValueError(f"expected a number, got {echo(value)}") from None

    @field_validator("cell_output", mode="before")
    @classmethod
    def _cell_output(cls, value: Any) -> list[dict[str, Any]] | None:
        if _is_null(value):
            return None
        if isinstance(value, str):
            value = load_json(value)  # ValueError: not JSON, or nested too deep
        elif depth_exceeds(value):
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
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
        raise ValueError(f"expected a boolean, got {echo(value)}")

    def time_text(self) -> str:
        """The time as JuNE writes it, ``2023-05-06 10:32:26.282`` (milliseconds, unless the time has finer
        digits)."""
        text = self.time.strftime("%Y-%m-%d %H:%M:%S.%f")
        return text[:-3] if self.time.microsecond % 1000 == 0 else text

    def to_row(self, *, output_as_text: bool) -> dict[str, Any]:
        """The event as a row of JuNE columns.

        Args:
            output_as_text: Write ``cell_output`` as a JSON string (CSV, Parquet) rather than a list.

        Returns:
            A dict with the keys of `JUNE_COLUMNS`, in that order.
        """
        row = self.model_dump()
        row["time"] = self.time_text()
        if output_as_text and self.cell_output is not None:
            row["cell_output"] = json.dumps(self.cell_output, ensure_ascii=False)
        return {name: row[name] for name in JUNE_COLUMNS}


_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


__all__ = [
    "EVENT_COLUMNS",
    "JUNE_COLUMNS",
    "REQUIRED_COLUMNS",
    "TIME_FORMAT_EXAMPLE",
    "JuneEvent",
]
