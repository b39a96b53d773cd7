"""Saved notebooks read as partial sessions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from themisto_env.data.notebook import read_notebook_session
from themisto_env.errors import DataError

DATA = Path(__file__).parents[1] / "fixtures"


def test_code_cells_in_execution_count_order() -> None:
    session = read_notebook_session(DATA / "small.ipynb")
    assert session.origin == "notebook"
    assert session.key == "notebook:small.ipynb" and session.notebook_name == "small.ipynb"
    assert [e.execution_count for e in session.executions] == [1, 3, 4, 5, 6]
    assert [e.source for e in session.executions] == [
        "import math",
        "r = 3",
        "r = 2\narea = math.pi * r ** 2\nprint(round(area, 2))",
        "area / r",
        "undefined_name",
    ]
    assert [e.index for e in session.executions] == [0, 1, 2, 3, 4]
    assert session.executions[1].cell_id == "4" * 32
    assert session.executions[1].cell_num == 4.0  # its place in the notebook
    assert session.event_counts == {} and session.restarts == 0


def test_saved_outputs_are_the_recorded_outputs() -> None:
    ex = read_notebook_session(DATA / "small.ipynb", key="mine").executions
    assert ex[2].recorded_outputs == [{"output_type": "stream", "name": "stdout", "text": "12.57\n"}]
    assert type(ex[2].recorded_outputs[0]) is dict
    assert ex[3].recorded_outputs[0]["data"] == {"text/plain": "4.1887902047863905"}
    assert [e.status for e in ex] == ["ok", "ok", "ok", "ok", "error"]
    assert ex[4].error is not None and ex[4].error["ename"] == "NameError"


def test_times_only_where_jupyterlab_recorded_them() -> None:
    session = read_notebook_session(DATA / "small.ipynb")
    first = session.executions[0]
    assert first.time == datetime(2024, 3, 1, 9, 0, 0, 100000, tzinfo=UTC)
    assert first.duration_s == pytest.approx(0.25)
    assert all(e.time is None and e.duration_s is None for e in session.executions[1:])


def test_broken_and_missing_notebooks(tmp_path: Path) -> None:
    path = DATA / "malformed" / "broken.ipynb"
    with pytest.raises(DataError, match=r"not a readable notebook") as info:
        read_notebook_session(path)
    assert info.value.path == str(path)
    with pytest.raises(DataError, match=r"no such file"):
        read_notebook_session(tmp_path / "none.ipynb")


def _strip_counts(tmp_path: Path, *, clear_outputs: bool = False) -> Path:
    notebook = json.loads((DATA / "small.ipynb").read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["execution_count"] = None
            for output in cell.get("outputs", []):
                if output.get("output_type") == "execute_result":
                    output["execution_count"] = None
            if clear_outputs:
                cell["outputs"] = []
    path = tmp_path / "no_counts.ipynb"
    path.write_text(json.dumps(notebook))
    return path


def test_a_notebook_without_execution_counts_is_read_in_document_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _strip_counts(tmp_path)
    with caplog.at_level("WARNING", logger="themisto_env.data.notebook"):
        session = read_notebook_session(path)
    code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert [e.source for e in session.executions] == ["".join(c["source"]) for c in code]
    assert [e.cell_num for e in session.executions] == sorted(e.cell_num for e in session.executions)
    assert all(e.execution_count is None for e in session.executions)
    assert "error" in [e.status for e in session.executions]  # statuses still come from the saved outputs
    (record,) = caplog.records
    assert record.getMessage() == f"{path}: no execution counts; reading its {len(code)} code cells in document order"


def test_a_cleared_notebook_has_nothing_recorded_to_compare_with(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _strip_counts(tmp_path, clear_outputs=True)
    with caplog.at_level("WARNING", logger="themisto_env.data.notebook"):
        session = read_notebook_session(path)
    assert session.executions and all(e.status == "unknown" for e in session.executions)
    assert "no outputs either" in caplog.records[0].getMessage()
