"""Kernel messages into notebook outputs: the one conversion, and its three callers agreeing on real kernels."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from themisto_env.data.june import read_sessions
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.outputs import DROPPED_KEY, OutputCollector

REPO = Path(__file__).resolve().parents[2]


def _msg(msg_type: str, **content: Any) -> dict[str, Any]:
    return {"header": {"msg_type": msg_type}, "msg_type": msg_type, "content": content}


def _display(text: str, display_id: str | None = None, *, update: bool = False) -> dict[str, Any]:
    transient = {"display_id": display_id} if display_id else {}
    kind = "update_display_data" if update else "display_data"
    return _msg(kind, data={"text/plain": text}, metadata={}, transient=transient)


def _stream(text: str, name: str = "stdout") -> dict[str, Any]:
    return _msg("stream", name=name, text=text)


def collect_outputs(messages: list[dict[str, Any]], *, limit: int | None = None) -> list[dict[str, Any]]:
    """The outputs of one execution's messages, as the sandbox collects them."""
    collector = OutputCollector(limit)
    for msg in messages:
        collector.add_message(msg)
    return collector.finish()


def _texts(outputs: list[dict[str, Any]]) -> list[str]:
    return [o["text"] if o["output_type"] == "stream" else o["data"]["text/plain"] for o in outputs]


def test_update_display_data_replaces_the_outputs_with_its_display_id() -> None:
    outputs = collect_outputs(
        [
            _display("a", "one"),
            _display("b", "two"),
            _display("a2", "one", update=True),
            _display("lost", "unknown", update=True),  # an id never displayed: ignored
            _msg("execute_result", data={"text/plain": "7"}, metadata={}, execution_count=3, transient={}),
        ]
    )
    assert _texts(outputs) == ["a2", "b", "7"]
    assert [o["output_type"] for o in outputs] == ["display_data", "display_data", "execute_result"]
    assert outputs[2]["execution_count"] == 3


def test_a_display_with_a_known_id_updates_the_earlier_ones_and_is_appended() -> None:
    outputs = collect_outputs([_display("a", "d"), _stream("x\n"), _display("b", "d")])
    assert _texts(outputs) == ["b", "x\n", "b"]  # as nbclient and JupyterLab show it


def test_clear_output_wait_clears_before_the_next_new_output_only() -> None:
    outputs = collect_outputs(
        [
            _display("frame", "d"),
            _msg("clear_output", wait=True),
            _display("updated", "d", update=True),  # an update does not trigger the pending clear
        ]
    )
    assert _texts(outputs) == ["updated"]
    outputs = collect_outputs(
        [_stream("frame 1\n"), _msg("clear_output", wait=True), _stream("frame 2\n"), _stream("done\n")]
    )
    assert _texts(outputs) == ["frame 2\ndone\n"]
    outputs = collect_outputs([_stream("gone\n"), _msg("clear_output", wait=False)])
    assert outputs == []
    # after a clear, the cleared outputs' display ids are forgotten
    outputs = collect_outputs([_display("a", "d"), _msg("clear_output"), _display("b", "d", update=True)])
    assert outputs == []


def test_streams_merge_by_name_until_another_output() -> None:
    outputs = collect_outputs(
        [
            _stream("a"),
            _stream("b\n"),
            _stream("warn\n", "stderr"),
            _stream("c\n"),
            _stream(""),
            _display("x"),
            _stream("d\n"),
            _msg("status", execution_state="idle"),
            _msg("execute_input", code="1"),
        ]
    )
    assert [(o["output_type"], o.get("name")) for o in outputs] == [
        ("stream", "stdout"),
        ("stream", "stderr"),
        ("stream", "stdout"),
        ("display_data", None),
        ("stream", "stdout"),
    ]
    assert _texts(outputs) == ["ab\n", "warn\n", "c\n", "x", "d\n"]


def test_the_cap_keeps_a_display_outputs_text_plain_and_says_what_it_dropped() -> None:
    image = "A" * 5_000
    collector = OutputCollector(limit=2_000)
    collector.add("stream", {"name": "stdout", "text": "before\n"})
    collector.add(
        "display_data",
        {"data": {"image/png": image, "text/plain": "<Figure size 640x480 with 1 Axes>"}, "metadata": {"x": 1}},
    )
    outputs = collector.finish()
    assert collector.truncated and collector.omitted == 0 and collector.dropped == 1
    figure = outputs[1]
    assert figure["data"] == {"text/plain": "<Figure size 640x480 with 1 Axes>"}
    assert figure["metadata"] == {"x": 1, DROPPED_KEY: ["image/png (5.0 kB)"]}
    assert len(outputs) == 2  # nothing was lost whole: no truncation note


def test_the_cap_cuts_streams_and_drops_what_cannot_shrink() -> None:
    collector = OutputCollector(limit=1_000)
    collector.add("stream", {"name": "stdout", "text": "x" * 1_500})
    collector.add("display_data", {"data": {"image/png": "A" * 100}, "metadata": {}})
    outputs = collector.finish()
    assert outputs[0]["text"] == "x" * 1_000
    assert outputs[-1] == {
        "output_type": "stream",
        "name": "stderr",
        "text": "\n[output truncated: 617 more bytes not shown]\n",
    }
    assert collector.omitted == 500 + len('{"image/png": ""}') + 100


def test_an_update_that_does_not_fit_keeps_text_plain() -> None:
    collector = OutputCollector(limit=1_000)
    collector.add("display_data", {"data": {"text/plain": "small"}, "metadata": {}, "transient": {"display_id": "p"}})
    big = {"data": {"text/plain": "big", "image/png": "A" * 2_000}, "metadata": {}, "transient": {"display_id": "p"}}
    collector.add("update_display_data", big)
    (output,) = collector.finish()
    assert output["data"] == {"text/plain": "big"} and output["metadata"][DROPPED_KEY] == ["image/png (2.0 kB)"]


# -- the three callers on real kernels ----------------------------------------------------------------

CELLS = (
    # clear_output(wait=True), then a display updated by id, merged streams, stderr between displays
    "import sys\n"
    "from IPython.display import display, clear_output\n"
    "print('frame 1')\n"
    "clear_output(wait=True)\n"
    "h = display('first', display_id=True)\n"
    "h.update('second')\n"
    "print('a', end='')\n"
    "print('b')\n"
    "display('other', display_id='z')\n"
    "print('oops', file=sys.stderr)\n"
    "display('last')\n"
    "h.update('third')\n"
    "40 + 2",
    # a pending clear is not triggered by an update; the result clears and stays
    "g = display('shown', display_id=True)\nclear_output(wait=True)\ng.update('updated')\n'result'",
)


def _make_bundled() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_bundled_under_test", REPO / "scripts" / "bundled" / "make_bundled.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_sandbox_recorder_and_generator_give_the_same_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "rec.jsonl"
    monkeypatch.setenv("THEMISTO_RECORD_PATH", str(log))
    generator = _make_bundled()._Kernel(tmp_path, 0)  # the bundled-data generator's kernel, recorder loaded
    try:
        generator.execute("%load_ext themisto_env.data.recorder", "a" * 32)
        generated = [generator.execute(code, f"{i:032x}")[0] for i, code in enumerate(CELLS)]
    finally:
        generator.close()
    with Kernel("local") as kernel:
        replayed = [kernel.execute(code).outputs for code in CELLS]
    (session,) = read_sessions(log)
    recorded = [e.recorded_outputs for e in session.executions]  # the %load_ext cell is not recorded
    assert [e.source for e in session.executions] == list(CELLS)

    def comparable(outputs: list[dict[str, Any]]) -> list[Any]:  # execution counts differ between kernels
        return [{k: v for k, v in o.items() if k != "execution_count"} for o in outputs]

    assert comparable(generated[0]) == comparable(recorded[0]) == comparable(replayed[0])
    assert comparable(generated[1]) == comparable(recorded[1]) == comparable(replayed[1])
    assert _texts(replayed[0]) == ["'third'", "ab\n", "'other'", "oops\n", "'last'", "42"]
    assert _texts(replayed[1]) == ["'result'"]


@pytest.mark.slow
def test_a_capped_figure_keeps_its_text_plain_on_a_real_kernel() -> None:
    code = "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
    with Kernel("local", limits=SandboxLimits(output_limit_bytes=2_048)) as kernel:
        result = kernel.execute(code)
    (figure,) = [o for o in result.outputs if o["output_type"] == "display_data"]
    assert figure["data"] == {"text/plain": "<Figure size 640x480 with 1 Axes>"}
    (dropped,) = figure["metadata"][DROPPED_KEY]
    assert dropped.startswith("image/png (") and dropped.endswith(" kB)")
    assert result.truncated
