"""JuNE event logs: reading, validation errors, sessions, round trips, the bundled log."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest

from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.june import read_sessions, sessions_from_events
from themisto_env.data.june_events import JUNE_COLUMNS, JuneEvent
from themisto_env.data.june_files import event_format, iter_events, write_events
from themisto_env.errors import DataError

DATA = Path(__file__).parents[1] / "fixtures"
MALFORMED = DATA / "malformed"


def test_jsonl_sessions_are_grouped_by_kernel_in_order() -> None:
    sessions = read_sessions(DATA / "june_small.jsonl")
    assert [s.key for s in sessions] == ["k-1", "k-2"]
    k1, k2 = sessions
    assert k1.notebook_name == "task1.ipynb"
    assert k1.user_id == "student_1"
    assert not k1.expert
    assert [e.source for e in k1.executions] == [
        "import math",
        "x = math.sqrt(16)\nprint(x)",
        "y",
        "import math",
        "x = math.sqrt(25)\nx",
        "while True:\n    pass",
        "print(x * 2)",
    ]
    assert [e.index for e in k1.executions] == list(range(7))
    assert k2.expert and k2.notebook_name == "task2.ipynb"  # follows the rename
    assert k2.event_counts == {"execute": 1, "finished_execute": 1, "notebook_renamed": 1}


def test_execution_details() -> None:
    k1 = read_sessions(DATA / "june_small.jsonl")[0]
    ex = k1.executions
    assert ex[0].duration_s == pytest.approx(0.25)
    assert ex[0].time == datetime(2023, 5, 6, 10, 0, 10)
    assert ex[1].recorded_outputs == [{"output_type": "stream", "name": "stdout", "text": "4.0\n"}]
    # the error came in its own row; the finish row had no outputs
    assert ex[2].status == "error"
    assert ex[2].error is not None and ex[2].error["ename"] == "NameError"
    assert ex[2].cell_deleted
    assert k1.deleted_cell_ids == ["c" * 32]
    # restart: flagged on the first execution after it only
    assert [e.restarted_before for e in ex] == [False, False, False, True, False, False, False]
    assert k1.restarts == 1
    assert ex[4].cell_id == ex[1].cell_id and ex[4].source != ex[1].source  # an edit of the same cell
    assert ex[5].interrupted and ex[5].error is not None and ex[5].duration_s == pytest.approx(3.1)
    # no finish: unknown status, no duration
    assert ex[6].status == "unknown" and ex[6].duration_s is None and ex[6].recorded_outputs == []
    # unknown event kinds are kept and counted
    assert k1.event_counts["cell_folded"] == 1
    assert ex[0].action_id == 2 and ex[0].finish_action_id == 3 and ex[0].session_id == "s-1"


def test_csv_as_pandas_writes_it() -> None:
    (session,) = read_sessions(DATA / "june_small.csv")
    assert session.key == "k-9" and session.user_id == "student_7"
    assert [e.status for e in session.executions] == ["ok", "error", "ok"]
    assert session.executions[0].source == 'import pandas as pd\ndf = pd.DataFrame({"a": [1, 2]})\ndf.shape'
    assert session.executions[0].duration_s == pytest.approx(0.337)
    assert session.executions[0].cell_num == 0.0
    assert session.executions[2].recorded_outputs[0]["data"]["text/plain"] == "np.int64(3)"
    events = list(iter_events(DATA / "june_small.csv"))
    assert events[0].event == "save_notebook" and events[0].cell_source is not None
    assert events[0].time_text() == "2023-05-06 10:32:26.282"


@pytest.mark.parametrize(
    ("name", "row", "field", "detail"),
    [
        ("bad_time.csv", 2, "time", "got 'yesterday at noon'"),
        ("bad_output.csv", 2, "cell_output", "not valid JSON"),
        ("bad_cell_num.csv", 1, "cell_num", "expected a number, got 'zero'"),
        ("bad_expert.csv", 1, "expert", "expected a boolean, got 'maybe'"),
        ("bad_action_id.jsonl", 2, "action_id", "expected an integer, got 'first'"),
        ("bad_json_line.jsonl", 2, None, "not valid JSON"),
        ("missing_kernel_id.jsonl", 2, "kernel_id", "missing column"),
        ("missing_column.csv", None, "kernel_id", "missing column"),
        ("missing_cell_source.jsonl", 2, "cell_source", "missing column: execute rows need the executed code"),
        ("missing_cell_output.csv", 2, "cell_output", "missing column: finished_execute rows need the outputs"),
    ],
)
def test_malformed_files_name_file_row_and_field(name: str, row: int | None, field: str | None, detail: str) -> None:
    path = MALFORMED / name
    with pytest.raises(DataError) as info:
        read_sessions(path)
    error = info.value
    assert (error.path, error.row, error.field) == (str(path), row, field)
    message = str(error)
    assert message.startswith(str(path))
    if row is not None:
        assert f"row {row}" in message
    if field is not None:
        assert f"field {field!r}" in message
    assert detail in message


def test_exact_message_for_a_bad_time() -> None:
    path = MALFORMED / "bad_time.csv"
    with pytest.raises(DataError) as info:
        list(iter_events(path))
    assert str(info.value) == (
        f"{path}, row 2, field 'time': expected a time like '2023-05-06 10:32:26.282', got 'yesterday at noon'"
    )


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"unknown event-log format"):
        list(iter_events(tmp_path / "log.txt"))
    with pytest.raises(DataError, match=r"no such file"):
        list(iter_events(tmp_path / "log.csv"))
    assert event_format("a/B.JSONL.GZ") == "jsonl"
    assert event_format("x.parquet") == "parquet"


def test_reading_is_lazy(tmp_path: Path) -> None:
    # the bad row is the second: the first event is produced before it is reached
    events = iter_events(MALFORMED / "bad_time.csv")
    assert next(events).action_id == 0
    with pytest.raises(DataError):
        next(events)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".parquet"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    events = list(iter_events(DATA / "june_small.jsonl")) + list(iter_events(DATA / "june_small.csv"))
    path = tmp_path / f"log{suffix}"
    assert write_events(path, events) == len(events)
    again = list(iter_events(path))
    assert again == events
    assert read_sessions(path) == sessions_from_events(events, source_path=path)


def test_round_trip_keeps_microseconds_and_empty_outputs(tmp_path: Path) -> None:
    event = JuneEvent(
        action_id=7,
        time=datetime(2024, 1, 2, 3, 4, 5, 123456),
        kernel_id="k",
        event="finished_execute",
        cell_output=[],
        cell_source="print('a,b\n\"c\"')",
    )
    for suffix in (".csv", ".jsonl", ".parquet"):
        path = tmp_path / f"one{suffix}"
        write_events(path, [event])
        (back,) = list(iter_events(path))
        assert back == event, suffix
    assert event.to_row(output_as_text=True)["time"] == "2024-01-02 03:04:05.123456"
    assert list(event.to_row(output_as_text=False)) == list(JUNE_COLUMNS)


def test_gzip_that_is_not_gzip(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl.gz"
    shutil.copy(DATA / "june_small.jsonl", path)
    with pytest.raises(DataError, match=r"cannot be read as jsonl"):
        list(iter_events(path))


def test_bundled_log_is_a_realistic_development_dataset() -> None:
    path = bundled_log_path()
    assert path.is_file() and path.stat().st_size < 5 * 1024 * 1024
    sessions = read_sessions(path)
    executions = [e for s in sessions for e in s.executions]
    assert len(sessions) >= 4
    assert len({s.notebook_name for s in sessions}) >= 2
    assert len(executions) >= 300
    assert sum(len(s.errors) for s in sessions) >= 8
    names = {e.error["ename"] for e in executions if e.error is not None}
    assert {"NameError", "KeyError"} <= names
    assert sum(s.restarts for s in sessions) >= 1
    assert any(e.restarted_before for e in executions)
    assert any(s.deleted_cell_ids for s in sessions)
    assert any(e.cell_deleted for e in executions)
    for session in sessions:
        assert all(e.status != "unknown" and e.duration_s is not None for e in session.executions)
        by_cell: dict[str | None, set[str]] = {}
        for e in session.executions:
            by_cell.setdefault(e.cell_id, set()).add(e.source)
        assert any(len(sources) > 1 for sources in by_cell.values()), session.key  # edits of one cell
        assert len(session.executions) >= 40
        times = [e.time for e in session.executions]
        assert times == sorted(times)
    kinds = {k for s in sessions for k in s.event_counts}
    assert {"create", "execute", "finished_execute", "error", "delete", "kernel_restarting"} <= kinds
    assert {"save_notebook", "rendered"} <= kinds
    outputs = [o for e in executions for o in e.recorded_outputs]
    assert any("image/png" in o.get("data", {}) or o.get("output_type") == "display_data" for o in outputs)
    assert any("text/html" in o.get("data", {}) for o in outputs)  # displayed DataFrames
