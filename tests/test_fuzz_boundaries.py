"""Fuzzing the boundaries: random logs, notebooks, results files, actions and tool arguments never raise
out of the public API except the documented errors.

- a JuNE log (CSV or JSON Lines) and a notebook: read, or a ``DataError`` of one line;
- a results file: read, or a ``DataError`` of one line;
- an env action (any JSON-like value, dicts shaped like actions, ``ToolCall`` objects of any name and
  arguments): a step whose ``tool_result`` answers, never an exception, and a small ``info``.

Bounded in time: few examples, no deadline (real kernels answer the tool calls).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import themisto_env  # noqa: F401  (registers the ids)
from themisto_env.data.june import read_sessions
from themisto_env.data.june_events import JUNE_COLUMNS
from themisto_env.data.notebook import read_notebook_session
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import TOOL_NAMES, ToolCall
from themisto_env.errors import DataError
from themisto_env.run.results import read_results

FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
times = st.one_of(
    st.datetimes().map(str),
    st.datetimes(timezones=st.timezones()).map(str),
    st.text(max_size=30),
    st.integers().map(str),
)


def one_line(error: Exception) -> None:
    message = str(error)
    assert "\n" not in message and len(message) < 1000, message[:2000]


@st.composite
def event_rows(draw: st.DrawFn) -> dict[str, Any]:
    row: dict[str, Any] = {
        "action_id": draw(st.one_of(st.integers(0, 100), scalars)),
        "time": draw(times),
        "kernel_id": draw(st.sampled_from(["k1", "k2", ""]) | st.text(max_size=5)),
        "event": draw(st.sampled_from(["execute", "finished_execute", "error", "kernel_restarting", "x"])),
    }
    for column in JUNE_COLUMNS:
        if column not in row and draw(st.booleans()):
            row[column] = draw(json_values)
    return row


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, allow_nan=True)


def csv_text(rows: list[dict[str, Any]]) -> str:
    import csv
    import io

    columns = sorted({key for row in rows for key in row}) or ["action_id"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: text_of(value) for key, value in row.items()})
    return out.getvalue()


@FUZZ
@given(rows=st.lists(event_rows(), max_size=6), as_csv=st.booleans())
def test_random_logs_read_or_raise_one_data_error(tmp_path: Path, rows: list[dict[str, Any]], as_csv: bool) -> None:
    path = tmp_path / ("log.csv" if as_csv else "log.jsonl")
    if as_csv:
        path.write_text(csv_text(rows))
    else:
        path.write_text("".join(json.dumps(row, allow_nan=True) + "\n" for row in rows))
    try:
        read_sessions(path)
    except DataError as exc:
        one_line(exc)


@st.composite
def notebooks(draw: st.DrawFn) -> Any:
    cell = st.fixed_dictionaries(
        {},
        optional={
            "cell_type": st.sampled_from(["code", "markdown", "raw"]) | scalars,
            "id": st.text(max_size=8) | scalars,
            "metadata": json_values,
            "source": st.text(max_size=20) | json_values,
            "execution_count": st.integers(-3, 5) | scalars,
            "outputs": st.lists(json_values, max_size=3) | json_values,
        },
    )
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": draw(st.lists(cell, max_size=4))}
    return draw(st.one_of(st.just(notebook), json_values))


@FUZZ
@given(notebook=notebooks())
def test_random_notebooks_read_or_raise_one_data_error(tmp_path: Path, notebook: Any) -> None:
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(notebook, allow_nan=True))
    try:
        read_notebook_session(path)
    except DataError as exc:
        one_line(exc)


@FUZZ
@given(lines=st.lists(json_values.map(lambda v: json.dumps(v, allow_nan=True)) | st.text(max_size=20), max_size=4))
def test_random_results_files_read_or_raise_one_data_error(tmp_path: Path, lines: list[str]) -> None:
    (tmp_path / "results.jsonl").write_text("\n".join(line.replace("\n", " ") for line in lines))
    try:
        read_results(tmp_path)
    except DataError as exc:
        one_line(exc)


@pytest.fixture(scope="module")
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = gym.make("themisto/NextCell-v0", **env_dataset, observation="tools", tool_budget=10**9).unwrapped
    made.reset(seed=0)
    yield made
    made.close()


tool_names = st.sampled_from([name for name in TOOL_NAMES if name != "try_cell"]) | st.text(max_size=40)
tool_args = st.dictionaries(
    st.sampled_from(["name", "n", "code", "limit", "x"]) | st.text(max_size=10), json_values, max_size=4
)
actions = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"kind": st.sampled_from([0, 0, 0, 1]) | scalars},
        optional={
            "tool": st.integers(-2, len(TOOL_NAMES) + 1) | scalars,
            "args": tool_args.map(lambda a: json.dumps(a, allow_nan=True)) | json_values,
            "text": st.text(max_size=30) | scalars,
        },
    ),
    st.builds(ToolCall, tool=tool_names, args=tool_args),
)


@FUZZ
@given(action=actions)
def test_random_actions_are_answered_never_raised(env: ThemistoEnv, action: Any) -> None:
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(obs["tool_result"], str)
    assert len(json.dumps(info, default=str)) < 20_000, "the action is echoed back whole"
    if terminated or truncated:
        env.reset(options={"sample": 0})
