"""The live recorder, loaded in a real ipykernel and read back with the JuNE reader."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from themisto_env.data.june import read_sessions
from themisto_env.data.june_files import iter_events

KERNEL_ID = "0123abcd-0000-4000-8000-00000000beef"


class _Frontend:
    """A minimal notebook frontend: sends cells with their cell id and collects what it would show."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.manager = KernelManager(
            kernel_name="python3",
            connection_file=str(workdir / f"kernel-{KERNEL_ID}.json"),
            transport="ipc",
            ip=str(workdir / "k"),
        )
        self.manager.start_kernel(cwd=str(workdir), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(
        self, code: str, cell_id: str | None = None, *, silent: bool = False, store_history: bool = True
    ) -> list[dict[str, Any]]:
        content = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = self.client.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
        self.client.shell_channel.send(msg)
        outputs: list[dict[str, Any]] = []
        while True:
            reply = self.client.get_iopub_msg(timeout=60)
            if reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                continue
            kind, body = reply["msg_type"], reply["content"]
            if kind == "status" and body["execution_state"] == "idle":
                break
            if kind == "stream":
                if outputs and outputs[-1]["output_type"] == "stream" and outputs[-1]["name"] == body["name"]:
                    outputs[-1]["text"] += body["text"]
                else:
                    outputs.append({"output_type": "stream", "name": body["name"], "text": body["text"]})
            elif kind == "error":
                outputs.append({"output_type": "error", **{k: body[k] for k in ("ename", "evalue", "traceback")}})
            elif kind in ("display_data", "execute_result"):
                out = {"output_type": kind, "data": body["data"], "metadata": body["metadata"]}
                if kind == "execute_result":
                    out["execution_count"] = body["execution_count"]
                outputs.append(out)
        return outputs

    def restart(self) -> None:
        self.manager.restart_kernel(now=False)
        self.client.wait_for_ready(timeout=60)

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def frontend(tmp_path: Path) -> Iterator[_Frontend]:
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(
        THEMISTO_RECORD_PATH=str(tmp_path / "rec" / "log.jsonl"),
        THEMISTO_USER_ID="tester",
        JPY_SESSION_NAME=str(tmp_path / "analysis.ipynb"),
    )
    fe = _Frontend(tmp_path, env)
    try:
        yield fe
    finally:
        fe.close()


def _text(outputs: list[dict[str, Any]]) -> str:
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")


@pytest.mark.slow
def test_records_what_the_notebook_shows(frontend: _Frontend, tmp_path: Path) -> None:
    log = tmp_path / "rec" / "log.jsonl"
    loaded = frontend.run("%load_ext themisto_env.data.recorder", "a" * 32)
    assert _text(loaded) == f"themisto recorder: recording executions to {log}\n"

    cells = [
        ("b" * 32, "import sys\nprint('hello')\nprint('oops', file=sys.stderr)\nprint('again')\n40 + 2"),
        ("c" * 32, "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})\ndisplay(df.head(2))\ndf.shape"),
        ("d" * 32, "undefined_name + 1"),
        ("e" * 32, "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"),
        (None, "def f(x):\n    return x * 2\nf(21)"),
    ]
    shown = []
    for cell_id, code in cells:
        shown.append(frontend.run(code, cell_id))
        # what the frontend's own introspection sends must not be recorded
        frontend.run("len(dir())", silent=True)
        frontend.run("_themisto_probe = 1\ndel _themisto_probe", store_history=False)

    # the notebook still shows the cell outputs as usual
    streams = {o["name"]: o["text"] for o in shown[0] if o["output_type"] == "stream"}
    assert streams == {"stdout": "hello\nagain\n", "stderr": "oops\n"}
    assert shown[0][-1]["data"] == {"text/plain": "42"}
    assert shown[2][0]["ename"] == "NameError"

    (session,) = read_sessions(log)
    assert session.key == KERNEL_ID
    assert session.notebook_name == "analysis.ipynb" and session.user_id == "tester" and not session.expert
    assert [e.source for e in session.executions] == [code for _, code in cells]
    assert [e.cell_id for e in session.executions] == [cell_id for cell_id, _ in cells]
    assert session.event_counts == {"error": 1, "execute": 5, "finished_execute": 5}
    for execution, outputs in zip(session.executions, shown, strict=True):
        assert execution.recorded_outputs == outputs, execution.source
        assert execution.duration_s is not None and execution.duration_s >= 0
    assert [e.status for e in session.executions] == ["ok", "ok", "error", "ok", "ok"]
    assert session.executions[0].recorded_outputs[-1]["execution_count"] == shown[0][-1]["execution_count"]
    assert session.executions[1].recorded_outputs[0]["output_type"] == "display_data"
    assert "text/html" in session.executions[1].recorded_outputs[0]["data"]
    plot = session.executions[3].recorded_outputs
    assert any("image/png" in o.get("data", {}) for o in plot)
    assert session.executions[2].error is not None and session.executions[2].error["traceback"]
    events = list(iter_events(log))
    assert [e.action_id for e in events] == list(range(len(events)))
    assert [e.event for e in events[4:7]] == ["execute", "error", "finished_execute"]


@pytest.mark.slow
def test_restart_and_unload(frontend: _Frontend, tmp_path: Path) -> None:
    log = tmp_path / "rec" / "log.jsonl"
    frontend.run("%load_ext themisto_env.data.recorder")
    frontend.run("x = 1", "1" * 32)
    again = frontend.run("%reload_ext themisto_env.data.recorder", "4" * 32)  # same process: not a restart
    assert "recording executions to" in _text(again)
    frontend.restart()
    frontend.run("%load_ext themisto_env.data.recorder")
    frontend.run("x = 2", "1" * 32)
    frontend.run("%unload_ext themisto_env.data.recorder", "2" * 32)
    frontend.run("y = 3", "3" * 32)  # not recorded any more

    (session,) = read_sessions(log)
    assert session.restarts == 1
    assert [e.source for e in session.executions] == [
        "x = 1",
        "%reload_ext themisto_env.data.recorder",
        "x = 2",
        "%unload_ext themisto_env.data.recorder",
    ]
    assert [e.restarted_before for e in session.executions] == [False, False, True, False]
    assert all(e.status == "ok" for e in session.executions)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["event"] for r in rows] == [
        "execute",
        "finished_execute",
        "execute",
        "finished_execute",
        "kernel_restarting",
        "execute",
        "finished_execute",
        "execute",
        "finished_execute",
    ]


def test_terminal_ipython_without_a_kernel(tmp_path: Path) -> None:
    """Outside a kernel the recorder tees the streams and wraps the display machinery."""
    import subprocess
    import sys

    log = tmp_path / "log.jsonl"
    script = "\n".join(
        [
            "from IPython.core.interactiveshell import InteractiveShell",
            "sh = InteractiveShell.instance()",
            "sh.run_line_magic('load_ext', 'themisto_env.data.recorder')",
            "sh.run_cell('print(1)\\n2', store_history=True)",
            "sh.run_cell('from IPython.display import display\\ndisplay({\"a\": 1})\\n1/0', store_history=True)",
            "sh.run_cell('3', store_history=True, silent=True)",
            "sh.run_cell('import sys; print(\"e\", file=sys.stderr); 4', store_history=True)",
        ]
    )
    env = {**os.environ, "THEMISTO_RECORD_PATH": str(log)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Out[1]: 2" in done.stdout  # the terminal still shows everything
    (session,) = read_sessions(log)
    summary = [
        [(o["output_type"], o.get("text") or o.get("data") or o.get("ename")) for o in e.recorded_outputs]
        for e in session.executions
    ]
    assert summary == [
        [("stream", "1\n"), ("execute_result", {"text/plain": "2"})],
        [("display_data", {"text/plain": "{'a': 1}"}), ("error", "ZeroDivisionError")],
        [("stream", "e\n"), ("execute_result", {"text/plain": "4"})],
    ]
    assert [e.status for e in session.executions] == ["ok", "error", "ok"]
