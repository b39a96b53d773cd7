"""``themisto run --trace FILE`` on the bundled data (real kernels, the real command in a subprocess): a JSON
line per span, every kind of span the runs exercise, parent links that hold; the rows' timing, the summary's
totals and the report's timing section; without the sdk, one line with the install hint."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from themisto_env.run.report import render_report
from themisto_env.run.results import TIMING_KINDS, read_results
from themisto_env.trace_export import INSTALL_HINT

RUNS = {
    # tools on the output task, consecutive samples of one trajectory: states restored and run forward
    "tools": ["--agent", "runtime-rules", "--task", "output", "--limit", "3", "--selection", "first"],
    # a model call per sample (a scripted model), and the execution score: the reply is a cell, so it runs in a
    # disposable kernel (an empty one would need no kernel, and the tools run's routes follow the build's timings)
    "model": [
        "--agent",
        "llm-static",
        "--model",
        "fake",
        "-M",
        'responses=["x = 1"]',
        "--execution-score",
        "--limit",
        "2",
    ],
}
SPANS = {
    "themisto.episode",
    "themisto.reset",
    "themisto.state.serve",
    "themisto.state.restore",
    "themisto.tool_call",
    "themisto.kernel.start",
    "themisto.kernel.call",
    "themisto.kernel.execute",
    "themisto.act",
    "themisto.score",
    "themisto.score.execution",
}
"""The spans the two runs exercise, besides the model calls' (named ``chat MODEL``)."""
KEYS = {"name", "trace_id", "span_id", "parent_id", "start_ns", "end_ns", "duration_ms", "status", "attributes"}


def _themisto(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from themisto_env.cli import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=900)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Both runs traced into one file (appended): the folder and the spans."""
    root = tmp_path_factory.mktemp("traced")
    for name, args in RUNS.items():
        done = _themisto("run", *args, "--out", f"runs/{name}", "--trace", "trace.jsonl", cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
    spans = [json.loads(line) for line in (root / "trace.jsonl").read_text().splitlines()]
    return root, spans


@pytest.mark.slow
def test_a_traced_run_writes_every_span_it_exercises(traced: tuple[Path, list[dict[str, Any]]]) -> None:
    _, spans = traced
    names = Counter(s["name"] for s in spans)
    assert set(names) >= SPANS, f"missing: {SPANS - set(names)}"
    assert all(set(s) >= KEYS for s in spans)
    assert names["themisto.episode"] == 1 + 2, "an episode per trajectory: the tools run's samples are in one"
    ids = {(s["trace_id"], s["span_id"]): s for s in spans}
    for span in spans:
        if span["parent_id"] is not None:
            parent = ids[(span["trace_id"], span["parent_id"])]  # in the file, in the same trace
            assert parent["start_ns"] <= span["start_ns"] <= span["end_ns"] <= parent["end_ns"], span["name"]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert len(chats) == 2 and all(ids[(c["trace_id"], c["parent_id"])]["name"] == "themisto.act" for c in chats)
    for chat in chats:
        assert chat["attributes"]["gen_ai.system"] == "fake" and chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["themisto.model.retries"] == 0
    acts = [s for s in spans if s["name"] == "themisto.act"]
    assert all(ids[(a["trace_id"], a["parent_id"])]["name"] == "themisto.episode" for a in acts)
    routes = {s["attributes"]["themisto.state.route"] for s in spans if s["name"] == "themisto.state.serve"}
    # the first state is restored or forked; later ones run forward where the build's timings make it cheaper
    assert routes <= {"forward", "restore", "fork"} and routes & {"restore", "fork"}, routes


@pytest.mark.slow
def test_rows_say_where_their_time_went_and_the_report_shows_it(traced: tuple[Path, list[dict[str, Any]]]) -> None:
    root, spans = traced
    tools, model = root / "runs" / "tools", root / "runs" / "model"
    rows = read_results(tools)
    assert len(rows) == 3 and all(r.timing is not None for r in rows)
    assert all(r.timing.state > 0 and r.timing.tools > 0 and r.timing.scoring > 0 for r in rows)
    assert all(r.timing.total <= r.seconds + max(r.timing.state, 0.0) + 0.05 for r in rows)
    summary = json.loads((tools / "summary.json").read_text())
    for kind in TIMING_KINDS:
        assert summary["timing"][kind] == pytest.approx(sum(getattr(r.timing, kind) for r in rows), abs=2e-3)
    assert summary["timing"]["samples"] == 3
    chatted = read_results(model)
    assert all(r.timing is not None and r.timing.model > 0 for r in chatted)
    page = render_report([tools, model])
    assert "Where the time went" in page and page.count("data:image/png") >= 4
    mean_state = sum(r.timing.state for r in rows) / len(rows)
    assert f'<td class="num">3</td><td class="num">{mean_state:.3f}</td>' in page


@pytest.mark.slow
def test_rows_of_older_runs_without_timing_still_read_and_report(traced: tuple[Path, list[dict[str, Any]]]) -> None:
    root, _ = traced
    old = root / "runs" / "old"
    old.mkdir()
    lines = (root / "runs" / "tools" / "results.jsonl").read_text().splitlines()
    (old / "results.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "timing"}) + "\n" for line in lines)
    )
    rows = read_results(old)
    assert rows and all(r.timing is None for r in rows)
    page = render_report([old])
    assert "Where the time went" in page and '<td class="num">0</td><td class="num"></td>' in page


@pytest.mark.slow
def test_worker_processes_append_their_spans_to_the_file(tmp_path: Path) -> None:
    args = ["--agent", "retrieval", "--limit", "4", "--workers", "2", "--out", "run", "--trace", "trace.jsonl"]
    done = _themisto("run", *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    spans = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    episodes = [s for s in spans if s["name"] == "themisto.episode"]
    rows = read_results(tmp_path / "run")
    assert len(episodes) == len({r.trajectory_id for r in rows}) >= 2, "each worker's episodes, none lost"
    scored = {s["attributes"]["themisto.trajectory.id"] for s in episodes}
    assert scored == {r.trajectory_id for r in rows}


def test_trace_without_the_sdk_is_one_line_with_the_install_hint(tmp_path: Path) -> None:
    hide = "import sys; sys.modules['opentelemetry.sdk.trace'] = None; from themisto_env.cli import main; main()"
    command = [sys.executable, "-c", hide, "run", "--agent", "retrieval", "--limit", "1", "--trace", "t.jsonl"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert output == [f"error: tracing (--trace) needs OpenTelemetry's sdk: {INSTALL_HINT}"]
    assert not (tmp_path / "t.jsonl").exists()
