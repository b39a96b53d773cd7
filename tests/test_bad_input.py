"""Bad input at every boundary is answered in one line (file, row, field), never a traceback.

Logs, notebooks, results files: a ``DataError`` whose message is one short line. Actions and tool calls: an
answer in ``tool_result`` (the env still usable), never an exception out of ``step``. Env options and
reset options: a ``ConfigError`` in one line. Nothing the caller sent is echoed back whole.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import themisto_env  # noqa: F401  (registers the ids)
from themisto_env.data.june import read_sessions
from themisto_env.data.notebook import read_notebook_session
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.errors import ConfigError, DataError
from themisto_env.run.results import read_results

HEADER = "action_id,time,kernel_id,event,cell_source,cell_output\n"
EXECUTE = "1,2023-05-06 10:32:26.282,k,execute,x=1,\n"


def deep_json(levels: int, *, kind: str = "list") -> str:
    """JSON text nested ``levels`` deep, written as text (building the value would itself recurse)."""
    if kind == "list":
        return "[" * levels + "1" + "]" * levels
    return '{"a":' * levels + "1" + "}" * levels


def deep_output(levels: int) -> str:
    """A JSON Lines row whose output nests ``levels`` deep."""
    return (
        '{"action_id": 1, "time": "2023-05-06 10:32:26", "kernel_id": "k", "event": "finished_execute", '
        '"cell_output": [{"output_type": "stream", "name": "stdout", "text": '
        + deep_json(levels, kind="dict")
        + "}]}\n"
    )


def notebook_text(cell: dict[str, Any]) -> str:
    base = {"cell_type": "code", "id": "a", "metadata": {}, "source": "x", "execution_count": 1, "outputs": []}
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{**base, **cell}]})


LOGS: dict[str, tuple[str, str, str]] = {  # case: (file name, text, what the line names)
    "time mixes zoned and naive": (
        "a.csv",
        HEADER + EXECUTE + "2,2023-05-06 10:32:27.282+02:00,k,finished_execute,,[]\n",
        "row 2, field 'time'",
    ),
    "cell_output nested 5000 deep": (
        "b.csv",
        HEADER + EXECUTE + '2,2023-05-06 10:32:27,k,finished_execute,,"' + deep_json(5000) + '"\n',
        "row 2, field 'cell_output'",
    ),
    "a JSON Lines row nested 100000 deep": ("c.jsonl", deep_json(100_000) + "\n", "row 1"),
    "an output object nested 3000 deep": ("d.jsonl", deep_output(3000), "row 1"),
    "an output object nested 100 deep": ("d.jsonl", deep_output(100), "row 1, field 'cell_output'"),
    "action_id infinite": ("e.csv", HEADER + "1e999,2023-05-06 10:32:26,k,execute,x=1,\n", "field 'action_id'"),
    "a 2 MB header": ("f.csv", "x" * 2_000_000 + "\n1\n", "field 'action_id'"),
    "a 1 MB time": ("g.csv", HEADER + "1," + "9" * 1_000_000 + ",k,execute,x=1,\n", "field 'time'"),
}


def one_line(message: str, *, at_most: int = 400) -> None:
    assert "\n" not in message and len(message) <= at_most, message[:1000]


@pytest.mark.parametrize("case", sorted(LOGS))
def test_bad_logs_are_one_line(tmp_path: Path, case: str) -> None:
    name, text, where = LOGS[case]
    (tmp_path / name).write_text(text)
    with pytest.raises(DataError) as caught:
        read_sessions(tmp_path / name)
    one_line(str(caught.value))
    assert where in str(caught.value)


NOTEBOOKS: dict[str, tuple[str, str]] = {  # case: (text, what the line names)
    "an output nested 5000 deep": (
        notebook_text({"outputs": [{"output_type": "stream", "name": "stdout", "text": "DEEP"}]}).replace(
            '"DEEP"', deep_json(5000, kind="dict")
        ),
        "nested deeper",
    ),
    "a file nested 100000 deep": (deep_json(100_000), "nested deeper"),
    "a source that is a number": (notebook_text({"source": 5}), "row 1, field 'source'"),
    "a cell that is a number": (
        json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [1]}),
        "not a readable notebook",
    ),
    "outputs not a list": (notebook_text({"outputs": {"a": 1}}), "not a readable notebook"),
    "a JSON list": ("[1, 2]", "not a notebook"),
}


@pytest.mark.parametrize("case", sorted(NOTEBOOKS))
def test_bad_notebooks_are_one_line(tmp_path: Path, case: str) -> None:
    text, where = NOTEBOOKS[case]
    (tmp_path / "n.ipynb").write_text(text)
    with pytest.raises(DataError) as caught:
        read_notebook_session(tmp_path / "n.ipynb")
    one_line(str(caught.value))
    assert where in str(caught.value)


def test_notebook_times_with_and_without_a_zone_are_both_utc(tmp_path: Path) -> None:
    timing = {"iopub.execute_input": "2023-01-01T00:00:00", "shell.execute_reply": "2023-01-01T00:00:01.5Z"}
    (tmp_path / "n.ipynb").write_text(notebook_text({"metadata": {"execution": timing}}))
    execution = read_notebook_session(tmp_path / "n.ipynb").executions[0]
    assert execution.duration_s == 1.5


@pytest.mark.parametrize("line", [deep_json(100_000), "[" + deep_json(900) + "]"])
def test_a_deep_results_line_is_one_line(tmp_path: Path, line: str) -> None:
    (tmp_path / "results.jsonl").write_text(line + "\n{}\n")
    with pytest.raises(DataError, match="row 1") as caught:
        read_results(tmp_path)
    one_line(str(caught.value))


@pytest.fixture(scope="module")
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = gym.make("themisto/NextCell-v0", **env_dataset, observation="tools", tool_budget=10_000).unwrapped
    made.reset(seed=0)
    yield made
    made.close()


ACTIONS: dict[str, Callable[[], object]] = {
    "kind infinite": lambda: {"kind": math.inf, "tool": 0, "args": "{}", "text": ""},
    "kind NaN": lambda: {"kind": math.nan, "tool": 0, "args": "{}", "text": ""},
    "kind 10**400": lambda: {"kind": 10**400, "tool": 0, "args": "{}", "text": ""},
    "tool infinite": lambda: {"kind": 0, "tool": math.inf, "args": "{}", "text": ""},
    "tool -1": lambda: {"kind": 0, "tool": -1, "args": "{}", "text": ""},
    "tool 1.5": lambda: {"kind": 0, "tool": 1.5, "args": "{}", "text": ""},
    "args JSON nested 100000 deep": lambda: {"kind": 0, "tool": 1, "args": deep_json(100_000), "text": ""},
    "args JSON nested 50 deep": lambda: {"kind": 0, "tool": 1, "args": '{"name": ' + deep_json(50) + "}"},
    "args object nested 5000 deep": lambda: {"kind": 0, "tool": 1, "args": {"name": json.loads(deep_json(900))}},
    "args 10 MB": lambda: {"kind": 0, "tool": 1, "args": json.dumps({"name": "x" * 10_000_000}), "text": ""},
    "a tool name of 10 MB": lambda: ToolCall(tool="x" * 10_000_000),
    "an argument name of 1 MB": lambda: ToolCall(tool="inspect_variable", args={"y" * 1_000_000: 1}),
    "10,000 unknown arguments": lambda: ToolCall(tool="inspect_variable", args={f"a{i}": i for i in range(10_000)}),
    "an infinite row count": lambda: ToolCall(tool="dataframe_head", args={"name": "sales", "n": math.inf}),
    "a 10 MB variable name": lambda: ToolCall(tool="inspect_variable", args={"name": "v" * 10_000_000}),
    "a prediction of bytes": lambda: {"kind": 1, "text": b"x"},
    "a prediction of 20 MB": lambda: {"kind": 1, "text": "x" * 20_000_000},
    "None": lambda: None,
    "a string": lambda: "print(1)",
}


@pytest.mark.parametrize("case", sorted(ACTIONS))
def test_bad_actions_are_answered_in_the_observation(env: ThemistoEnv, case: str) -> None:
    obs, reward, terminated, truncated, info = env.step(ACTIONS[case]())
    assert obs["tool_result"].startswith(("Invalid action", "Error")), obs["tool_result"][:300]
    assert len(json.dumps(info, default=str)) < 20_000, "the caller's input is echoed back whole"
    assert not terminated
    obs, *_ = env.step(ToolCall(tool="inspect_variable", args={"name": "sales"}))
    assert "DataFrame" in obs["tool_result"], "the env is still usable"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sample": "sales-notebook:3"}, "'sample' is an index"),
        ({"sample": math.inf}, "'sample' is an index"),
        ({"sample": 999}, "out of range"),
        ({"trajectory": 10**6}, "no trajectory"),
        ({"trajectory": math.nan}, "no trajectory"),
        ({"trajectory": "x" * 1_000_000}, "no trajectory"),
        ({"bogus": 1}, "unknown reset option 'bogus'"),
    ],
)
def test_bad_reset_options_are_one_line_and_leave_the_env_usable(
    env: ThemistoEnv, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        env.reset(options=options)
    one_line(str(caught.value))
    env.reset(options={"sample": 0})
    obs, *_ = env.step(ToolCall(tool="list_variables"))
    assert "rng" in obs["tool_result"] or "np" in obs["tool_result"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"bogus": 1}, "bogus: no such option"),
        ({"tool_budget": math.inf}, "tool_budget: "),
        ({"reward": {"x" * 10**6: 1}}, "reward"),
    ],
)
def test_bad_env_options_are_one_line(env_dataset: dict[str, str], options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        gym.make("themisto/NextCell-v0", **env_dataset, **options)
    one_line(str(caught.value))
