"""Writing JuNE logs for the tests, benchmarks and the bundled log's script: `write_events`, the
inverse of `themisto_env.data.june_files.iter_events` (the format follows the suffix)."""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable
from pathlib import Path

from themisto_env.data.june_events import JUNE_COLUMNS, JuneEvent
from themisto_env.data.june_files import event_format


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
    opener = gzip.open if file.name.lower().endswith(".gz") else open
    with opener(file, "wt", encoding="utf-8", newline="") as handle:
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
