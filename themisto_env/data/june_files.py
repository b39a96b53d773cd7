"""JuNE log files: read and validate CSV, Parquet or JSON Lines logs into `JuneEvent`
rows, write them back.

Supported suffixes: ``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``, ``.jsonl``, ``.jsonl.gz``, ``.ndjson``,
``.ndjson.gz``. A malformed row raises [`DataError`][themisto_env.errors.DataError] naming the file, the
1-based data row and the field.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from themisto_env.data.june_events import EVENT_COLUMNS, JUNE_COLUMNS, REQUIRED_COLUMNS, JuneEvent
from themisto_env.data.limits import MAX_DEPTH, depth_exceeds, echo, load_json
from themisto_env.errors import DataError

EventFormat = Literal["csv", "parquet", "jsonl"]

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
    present = [str(column) for column in columns]
    for name in REQUIRED_COLUMNS:
        if name not in present:
            shown = echo(", ".join(present), 200) if present else "nothing"
            raise DataError(f"missing column (the header has: {shown})", path=path, field=name)


def _iter_csv(path: Path) -> Iterator[tuple[int, JuneEvent]]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with _open_text(path, "r") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None:
            raise DataError("empty file: no header row", path=path)
        _check_header(reader.fieldnames, path)
        for row, raw in enumerate(reader, start=1):
            if None in raw:
                raise DataError("more values than columns", path=path, row=row)
            yield row, _event(raw, path, row)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, JuneEvent]]:
    with _open_text(path, "r") as handle:
        for row, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = load_json(line, max_depth=1000)  # deeper cannot parse; each value is checked below
            except ValueError as exc:
                raise DataError(str(exc), path=path, row=row) from None
            if not isinstance(raw, dict):
                raise DataError(f"expected a JSON object, got {type(raw).__name__}", path=path, row=row)
            for name, value in raw.items():
                if depth_exceeds(value, MAX_DEPTH):
                    raise DataError(f"nested deeper than {MAX_DEPTH} levels", path=path, row=row, field=name)
            yield row, _event(raw, path, row)


def _iter_parquet(path: Path) -> Iterator[tuple[int, JuneEvent]]:
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
            yield row, _event(raw, path, row)


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
    first_zoned: tuple[int, bool] | None = None  # (row, zoned) of the first event: all must agree
    try:
        for row, event in readers[fmt](file):
            zoned = event.time.tzinfo is not None
            if first_zoned is None:
                first_zoned = (row, zoned)
            elif zoned != first_zoned[1]:
                raise DataError(
                    f"a time {'with' if zoned else 'without'} a zone, but row {first_zoned[0]}'s is "
                    f"{'with' if first_zoned[1] else 'without'} one: write every time of a log the same way",
                    path=file,
                    row=row,
                    field="time",
                )
            yield event
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, csv.Error) as exc:
        raise DataError(f"cannot be read as {fmt} ({exc})", path=file) from None


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


__all__ = ["EventFormat", "event_format", "iter_events", "write_events"]
