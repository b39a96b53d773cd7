"""A build's spans (a real local kernel, opentelemetry-sdk's in-memory exporter): one span per session, one per
replayed cell under it, with what the cell came to."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.env_fixtures import CELLS, write_notebook
from themisto_env.build.builder import build_dataset
from themisto_env.data.trajectory import read_trajectories


@pytest.mark.slow
def test_a_build_traces_its_session_and_each_cell(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    notebook = write_notebook(tmp_path / "sales.ipynb")
    report = build_dataset([notebook], tmp_path / "data", snapshot_dir=tmp_path / "snapshots", progress=False)
    assert report.built and not report.failed
    (trajectory,) = read_trajectories(tmp_path / "data")
    finished = spans.get_finished_spans()
    (session,) = [s for s in finished if s.name == "themisto.build.session"]
    assert session.attributes["themisto.trajectory.id"] == trajectory.id
    assert session.attributes["themisto.build.complete"] is True
    assert session.attributes["themisto.build.steps"] == session.attributes["themisto.executions"] == len(CELLS)
    cells = sorted((s for s in finished if s.name == "themisto.build.cell"), key=lambda s: s.start_time)
    assert [c.parent.span_id for c in cells] == [session.context.span_id] * len(CELLS)
    assert [c.attributes["themisto.step"] for c in cells] == [s.index for s in trajectory.steps]
    for cell, step in zip(cells, trajectory.steps, strict=True):
        assert cell.attributes["themisto.cell.status"] == step.status == "ok"
        assert cell.attributes["themisto.snapshot.digest"] == step.snapshot
        executes = [
            s for s in finished if s.name == "themisto.kernel.execute" and s.parent.span_id == cell.context.span_id
        ]
        assert len(executes) == 1, "each cell is one execute request in the kernel"
