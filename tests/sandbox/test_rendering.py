"""Rendering of cell outputs (the output-prediction target) and normalisation for replay agreement."""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

import numpy as np
import pandas as pd
import pytest

from themisto_env.errors import DataError
from themisto_env.sandbox.rendering import normalize_for_comparison, render_outputs, strip_ansi


def stream(text: str | list[str], name: str = "stdout") -> dict[str, Any]:
    return {"output_type": "stream", "name": name, "text": text}


def result(data: dict[str, Any], kind: str = "execute_result") -> dict[str, Any]:
    out: dict[str, Any] = {"output_type": kind, "data": data, "metadata": {}}
    if kind == "execute_result":
        out["execution_count"] = 3
    return out


def error(ename: str, evalue: str) -> dict[str, Any]:
    traceback = [
        "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
        f"\x1b[0;31m{ename}\x1b[0m                  Traceback (most recent call last)",
        "File \x1b[0;32m/tmp/ipykernel_4242/2853145743.py:1\x1b[0m\n"
        "\x1b[0;32m----> 1\x1b[0m df[\x1b[38;5;124m'x'\x1b[39m]",
        f"\x1b[0;31m{ename}\x1b[0m: {evalue}",
    ]
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback}


# ---------------------------------------------------------------------------------------------------
# render_outputs


def test_no_outputs() -> None:
    assert render_outputs([]) == ""


def test_stream_text() -> None:
    assert render_outputs([stream("hello\n")]) == "hello"
    assert render_outputs([stream(["line 1\n", "line 2\n"])]) == "line 1\nline 2"
    assert render_outputs([stream("a\n\n")]) == "a\n"  # print("a\n") shows a blank line after a


def test_adjacent_streams_merge_as_in_a_notebook() -> None:
    # print("a", end=""); print("b") arrives as two messages but shows as one line.
    assert render_outputs([stream("a"), stream("b\n")]) == "ab"
    assert render_outputs([stream("out\n"), stream("err\n", "stderr"), stream("out2\n")]) == "out\nerr\nout2"


def test_stderr_can_be_left_out() -> None:
    outputs = [stream("42\n"), stream("FutureWarning: x\n", "stderr")]
    assert render_outputs(outputs) == "42\nFutureWarning: x"
    assert render_outputs(outputs, include_stderr=False) == "42"


def test_stream_ansi_and_carriage_returns() -> None:
    assert render_outputs([stream("\x1b[1;31mred\x1b[0m text\n")]) == "red text"
    tqdm = (
        "\r  0%|          | 0/3 [00:00<?, ?it/s]"
        "\r 33%|███▎      | 1/3 [00:00<00:01,  1.99it/s]"
        "\r100%|██████████| 3/3 [00:01<00:00,  2.00it/s]"
        "\r100%|██████████| 3/3 [00:01<00:00,  2.00it/s]\n"
    )
    assert render_outputs([stream(tqdm, "stderr")]) == "100%|██████████| 3/3 [00:01<00:00,  2.00it/s]"
    # A shorter overwrite keeps the tail of the longer text, as in a terminal.
    assert render_outputs([stream("loading....\rdone\n")]) == "doneing...."
    assert render_outputs([stream("a\r\nb\n")]) == "a\nb"
    assert render_outputs([stream("trailing\r")]) == "trailing"


def test_execute_result_and_display_data() -> None:
    df = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
    outputs = [
        stream("shape: (2, 2)\n"),
        result({"text/plain": str(df), "text/html": df.to_html()}),
    ]
    assert render_outputs(outputs) == "shape: (2, 2)\n" + str(df)
    assert render_outputs([result({"text/plain": ["(100, ", "5)"]})]) == "(100, 5)"


def test_matplotlib_figure_uses_its_text_plain() -> None:
    figure = result({"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 640x480 with 1 Axes>"}, "display_data")
    lines = result({"text/plain": "[<matplotlib.lines.Line2D at 0x7f3a1c2b4d50>]"})
    assert render_outputs([lines, figure]) == (
        "[<matplotlib.lines.Line2D at 0x7f3a1c2b4d50>]\n<Figure size 640x480 with 1 Axes>"
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"image/png": "..."}, "<image/png>"),
        ({"text/html": "<b>x</b>", "image/png": "..."}, "<image/png>"),
        ({"text/html": "<b>x</b>", "application/json": {}}, "<text/html>"),
        ({"application/vnd.custom+json": {}, "application/pdf": "..."}, "<application/pdf>"),
        ({}, ""),
    ],
)
def test_placeholder_names_the_mime_type(data: dict[str, Any], expected: str) -> None:
    assert render_outputs([result(data, "display_data")]) == expected


def test_error_is_name_and_value_without_traceback() -> None:
    rendered = render_outputs([stream("before\n"), error("KeyError", "'price'")])
    assert rendered == "before\nKeyError: 'price'"
    assert "ipykernel" not in rendered
    assert render_outputs([error("KeyboardInterrupt", "")]) == "KeyboardInterrupt"
    assert render_outputs([error("\x1b[0;31mValueError\x1b[0m", "bad \x1b[1mvalue\x1b[0m")]) == (
        "ValueError: bad value"
    )


def test_parts_join_with_one_newline_and_skip_empty_ones() -> None:
    outputs = [stream("a\n"), result({"text/plain": "5"}), stream(""), result({}, "display_data"), stream("b")]
    assert render_outputs(outputs) == "a\n5\nb"


def test_unknown_output_types_are_ignored_and_non_dicts_rejected() -> None:
    assert render_outputs([{"output_type": "future_kind", "x": 1}, stream("ok\n")]) == "ok"
    with pytest.raises(DataError, match="output 1"):
        render_outputs([stream("ok"), "not an output"])  # type: ignore[list-item]


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[38;5;124mx\x1b[39m \x1b]0;title\x07y \x1b(Bz") == "x y z"
    assert strip_ansi("plain") == "plain"


# ---------------------------------------------------------------------------------------------------
# normalize_for_comparison: what two runs of the same cell may differ in must compare equal ...


class Model:
    """A user class whose default repr carries the object's address."""


def _stable_id(value: str) -> str:
    """A test id without the memory addresses in a repr: pytest-xdist needs the same ids in every worker."""
    return re.sub(r"0x[0-9a-fA-F]+", "0x", value)[:60]


def _two_reprs(factory: Any) -> tuple[str, str]:
    a, b = factory(), factory()
    return repr(a), repr(b)


@pytest.mark.parametrize(
    ("recorded", "replayed"),
    [
        _two_reprs(Model),
        _two_reprs(lambda: lambda x: x),
        _two_reprs(lambda: (i for i in range(3))),
        ("[<matplotlib.lines.Line2D at 0x7f3a1c2b4d50>]", "[<matplotlib.lines.Line2D at 0x7fe0aa014e10>]"),
        ("<AxesSubplot:xlabel='age'>\n<Figure at 0x10c4e9a90>", "<AxesSubplot:xlabel='age'>\n<Figure at 0x11d0f2b50>"),
        (
            "CPU times: user 2.1 ms, sys: 0 ns, total: 2.1 ms\nWall time: 2.54 ms\n42",
            "CPU times: user 1.87 ms, sys: 312 µs, total: 2.18 ms\nWall time: 3.1 ms\n42",
        ),
        (
            "1.23 ms ± 45.6 µs per loop (mean ± std. dev. of 7 runs, 1,000 loops each)",
            "987 µs ± 12.1 µs per loop (mean ± std. dev. of 7 runs, 1,000 loops each)",
        ),
        (
            "The slowest run took 5.21 times longer than the fastest. This could mean that an "
            "intermediate result is being cached.\n100000 loops, best of 3: 2.5 µs per loop",
            "100000 loops, best of 3: 2.7 µs per loop",
        ),
        ("training took 12.5 s\naccuracy 0.93", "training took 11.9 s\naccuracy 0.93"),
        (
            "Epoch 1/2\n32/32 [==============================] - 1s 12ms/step - loss: 0.6931",
            "Epoch 1/2\n32/32 [==============================] - 2s 15ms/step - loss: 0.6931",
        ),
        (
            "100%|██████████| 50/50 [00:03<00:00, 15.21it/s]",
            "100%|██████████| 50/50 [00:02<00:00, 17.80it/s]",
        ),
        (
            "/tmp/ipykernel_4242/2853145743.py:3: SettingWithCopyWarning: \nA value is trying to be set",
            "/tmp/ipykernel_977/1190371920.py:3: SettingWithCopyWarning: \nA value is trying to be set",
        ),
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/tmpa1b2c3d4/out.csv'",
            "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/tmpzz9y8x7w/out.csv'",
        ),
        ("saved to /var/folders/x1/abc/T/tmpk3/model.pkl", "saved to /var/folders/q9/def/T/tmpj2/model.pkl"),
        ("worker started, pid 31337", "worker started, pid 4021"),
        ("Process PID: 123 finished", "Process PID: 98765 finished"),
        ("x = 1   \n\n\n", "x = 1"),
        ("\x1b[0;31mKeyError\x1b[0m: 'x'", "KeyError: 'x'"),
    ],
    ids=_stable_id,
)
def test_normalize_makes_run_to_run_variation_equal(recorded: str, replayed: str) -> None:
    assert recorded != replayed
    assert normalize_for_comparison(recorded) == normalize_for_comparison(replayed)


def test_normalize_real_temporary_paths_and_pids() -> None:
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        recorded = f"wrote {os.path.join(first, 'a.csv')} (pid={os.getpid()})"
        replayed = f"wrote {os.path.join(second, 'a.csv')} (pid={os.getpid() + 1})"
    assert normalize_for_comparison(recorded) == normalize_for_comparison(replayed)


# ... and what differs in substance must not.


def _frame(seed: int, rows: int = 5) -> str:
    rng = np.random.default_rng(seed)
    return str(pd.DataFrame(rng.normal(size=(rows, 3)).round(3), columns=["age", "income", "score"]))


def _sklearn_repr(**params: Any) -> str:
    from sklearn.ensemble import RandomForestClassifier

    return repr(RandomForestClassifier(**params))


@pytest.mark.parametrize(
    ("recorded", "replayed"),
    [
        (_frame(0), _frame(1)),
        (_frame(0, rows=5), _frame(0, rows=6)),
        (str(pd.Series([1.5, 2.5], name="s").describe()), str(pd.Series([1.5, 2.6], name="s").describe())),
        (_sklearn_repr(max_depth=5), _sklearn_repr(max_depth=6)),
        ("(150, 4)", "(150, 5)"),
        ("KeyError: 'price'", "KeyError: 'prices'"),
        ("ValueError: could not convert string to float: 'a'", "TypeError: could not convert string to float: 'a'"),
        ("0xff", "0xfe"),
        ("hex: 0x1f4", "hex: 0x1f5"),
        ("accuracy 0.93", "accuracy 0.94"),
        ("loaded /home/user/data/train.csv", "loaded /home/user/data/test.csv"),
        ("100/100 steps", "99/100 steps"),
        ("x = 1\ny = 2", "x = 1\n\ny = 2"),
        ("  indented", "indented"),
        ("min    1.0\nmax    9.0", "min    2.0\nmax    9.0"),
        ("took 3 steps", "took 4 steps"),
    ],
)
def test_normalize_keeps_real_differences(recorded: str, replayed: str) -> None:
    assert normalize_for_comparison(recorded) != normalize_for_comparison(replayed)


def test_normalize_leaves_ordinary_output_alone() -> None:
    frame = _frame(3)
    assert normalize_for_comparison(frame) == "\n".join(line.rstrip() for line in frame.split("\n"))
    assert normalize_for_comparison(_sklearn_repr(n_estimators=50)) == "RandomForestClassifier(n_estimators=50)"
    text = "   col_0  col_1\n0    1.5    2.0\n\nrows: 2"
    assert normalize_for_comparison(text) == text


def test_rendering_then_normalising_a_replayed_cell() -> None:
    recorded = [
        stream("CPU times: user 5 ms, sys: 1 ms, total: 6 ms\nWall time: 6.2 ms\n"),
        result({"text/plain": "<__main__.Model object at 0x7f0011223344>"}),
        error("ZeroDivisionError", "division by zero"),
    ]
    replayed = [
        stream("CPU times: user 4 ms, sys: 0 ns, total: 4 ms\n"),
        stream("Wall time: 4.9 ms\n"),
        result({"text/plain": "<__main__.Model object at 0x7f99aabbccdd>"}),
        error("ZeroDivisionError", "division by zero"),
    ]
    assert render_outputs(recorded) != render_outputs(replayed)
    assert normalize_for_comparison(render_outputs(recorded)) == normalize_for_comparison(render_outputs(replayed))
