"""Outputs recorded as kind and size only (JuNE as published): the shape written, read back and compared."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import nbformat

from themisto_env.data.agreement import agreement
from themisto_env.data.june import read_sessions
from themisto_env.data.june_events import JuneEvent
from themisto_env.data.june_files import write_events
from themisto_env.data.kind_and_size import parts, published_events, record_level, same_parts, to_kind_and_size


def _out(text: str, name: str = "stdout") -> dict:
    return nbformat.v4.new_output("stream", name=name, text=text)


def _res(text: str) -> dict:
    return nbformat.v4.new_output("execute_result", data={"text/plain": text}, execution_count=1)


def test_the_published_shape_is_the_kind_and_the_length_of_the_text() -> None:
    shaped = to_kind_and_size([_out("hello, published world\n")])
    assert shaped == [{"output_type": "stream", "size": 23}]  # JuNE's own example
    assert record_level(shaped) == "kind-and-size"
    assert record_level([_out("x")]) == "content" and record_level(None) == "nothing"


def test_a_published_log_reads_back_in_every_file_format(tmp_path: Path) -> None:
    events = [
        JuneEvent(action_id=0, time=datetime(2023, 5, 6, 10, 0), kernel_id="k", event="execute", cell_index="c"),
        JuneEvent(
            action_id=1,
            time=datetime(2023, 5, 6, 10, 0, 1),
            kernel_id="k",
            event="finished_execute",
            cell_index="c",
            cell_output=[_out("4\n"), _res("(150, 4)")],
        ),
    ]
    for suffix in (".jsonl", ".csv", ".parquet"):
        path = tmp_path / f"log{suffix}"
        write_events(path, published_events(events))
        (session,) = read_sessions(path)
        assert session.executions[0].recorded_outputs == [
            {"output_type": "stream", "size": 2},
            {"output_type": "execute_result", "size": 8},
        ], suffix


def test_kinds_in_order_sizes_and_error_names_are_what_is_compared() -> None:
    replayed = [_out("a\n"), _out("b\n"), _res("[1, 2, 3]")]  # two writes of one stream are one part
    assert agreement(to_kind_and_size(replayed), replayed).kind == "ok"
    assert agreement(to_kind_and_size([_out("a\nb\n"), _res("[1, 2]")]), replayed).agrees is False
    assert agreement(to_kind_and_size([_res("[1, 2, 3]")]), replayed).agrees is False  # a kind missing
    error = nbformat.v4.new_output("error", ename="KeyError", evalue="'x'", traceback=[])
    named = to_kind_and_size([error], error_names=True)
    assert agreement(named, [error]).agrees
    other = nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])
    assert agreement(named, [other]).kind == "error-vs-ok"
    assert agreement(to_kind_and_size([error]), [other]).agrees  # no name recorded: the kind only


def test_a_size_may_differ_by_the_characters_that_vary_between_runs_and_no_more() -> None:
    seen = to_kind_and_size([_out("<function f at 0x7f3a1c2b4d50>\n")])
    assert agreement(seen, [_out("<function f at 0x55d1c2b4d5>\n")]).agrees  # an address, two digits shorter
    assert not agreement(seen, [_out("<function first_of_many at 0x7f3a1c2b4d50>\n")]).agrees
    exact = to_kind_and_size([_out("[1, 2, 3]\n")])  # nothing in it varies between runs: the size is exact
    assert agreement(exact, [_out("[1, 2, 7]\n")]).agrees  # (the same length: what kind and size cannot see)
    assert not agreement(exact, [_out("[1, 2, 30]\n")]).agrees


def test_what_the_replay_alone_shows_names_the_cause() -> None:
    warned = [_out("/x/sklearn/_logistic.py:599: ConvergenceWarning: lbfgs failed\n", "stderr"), _res("0.93")]
    then = to_kind_and_size([_out("/y/site-packages/sklearn/_logistic.py:599: ConvergenceWarning: no\n", "stderr")])
    assert agreement([*then, *to_kind_and_size([_res("0.93")])], warned).kind == "warning"
    scalar = [_res("np.int64(8)")]
    assert agreement(to_kind_and_size([_res("8")]), scalar).kind == "environment"  # numpy 2's repr
    missing = [nbformat.v4.new_output("error", ename="ModuleNotFoundError", evalue="No module named 'sns'")]
    assert agreement(to_kind_and_size([_res("<Axes>")]), missing).kind == "missing-module"


def test_a_display_is_compared_by_its_kind_only() -> None:
    figure = nbformat.v4.new_output("display_data", data={"image/png": "iVBOR" * 900, "text/plain": "<Figure>"})
    seen = parts([{"output_type": "display_data", "size": 120_000}])
    assert same_parts(seen, parts([figure]))
