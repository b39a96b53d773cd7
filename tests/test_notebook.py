"""Saved notebooks read as partial sessions."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from themisto_env.errors import DataError
from themisto_env.notebook import read_notebook_session

DATA = Path(__file__).parent / "data"


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
