"""Where a build's time goes (issue 43): each trajectory's replay time, and within it the snapshots and the second
replays, in the build's report (never in the dataset)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from themisto_env.build.builder import build_dataset
from themisto_env.build.timing import (
    KEEP_STATE,
    REPLAY,
    SECOND_REPLAY,
    SNAPSHOT,
    measuring,
    timed,
    timing_summary,
)
from themisto_env.data.trajectory import read_trajectories

CELLS = [
    ("import random", []),
    ("print(random.random())", [nbformat.v4.new_output("stream", name="stdout", text="0.123\n")]),  # replayed twice
    ("x = 1", []),
    ("y = x + 1", []),
    ("print(y)", [nbformat.v4.new_output("stream", name="stdout", text="2\n")]),
]


def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s, execution_count=i + 1, outputs=o) for i, (s, o) in enumerate(CELLS)]
    nbformat.write(nb, path)
    return path


def test_timed_adds_up_only_inside_a_measured_block() -> None:
    with timed(SNAPSHOT):  # nothing measured: nothing kept, nothing raised
        pass
    with measuring() as seconds:
        with timed(SNAPSHOT):
            pass
        with timed(SNAPSHOT):
            pass
    assert set(seconds) == {SNAPSHOT, REPLAY} and 0 < seconds[SNAPSHOT] <= seconds[REPLAY]


def test_the_summary_divides_by_the_replay_time() -> None:
    timings = {"a": {REPLAY: 4.0, SNAPSHOT: 1.0, SECOND_REPLAY: 0.5}, "b": {REPLAY: 6.0, SNAPSHOT: 1.0}}
    summary = timing_summary(timings, {"a": 10, "b": 30, "c": 99})  # c: not replayed here (skipped)
    assert summary["replay_s"] == 10.0 and summary["executions"] == 40
    assert summary["executions_per_s_per_worker"] == 4.0
    assert summary["snapshot_share"] == 0.2 and summary["second_replay_share"] == 0.05
    assert summary["keep_state_s"] == 0.0 and summary["keep_state_share"] == 0.0
    assert timing_summary({}, {})["executions_per_s_per_worker"] is None


@pytest.mark.slow  # two builds of five cells, a kernel each
def test_a_build_reports_its_snapshots_and_second_replays(tmp_path: Path) -> None:
    source = _notebook(tmp_path / "draws.ipynb")
    report = build_dataset([source], tmp_path / "dataset", snapshot_dir=tmp_path / "snapshots", progress=False)
    (trajectory,) = read_trajectories(tmp_path / "dataset")
    assert trajectory.steps[1].replay_stable is False  # the second replay ran
    seconds = report.timings[trajectory.id]
    assert set(seconds) == {REPLAY, SNAPSHOT, SECOND_REPLAY, KEEP_STATE}
    assert all(seconds[part] > 0 for part in seconds)
    assert seconds[SNAPSHOT] + seconds[SECOND_REPLAY] + seconds[KEEP_STATE] < seconds[REPLAY] <= report.seconds
    summary = report.timing([trajectory])
    assert summary["executions"] == len(CELLS) and summary["executions_per_s_per_worker"] > 0
    assert 0 < summary["snapshot_share"] < 1 and 0 < summary["second_replay_share"] < 1
    written = (tmp_path / "dataset" / "trajectories.jsonl").read_text()
    assert SECOND_REPLAY not in written and KEEP_STATE not in written  # the report's, not the dataset's

    again = build_dataset(
        [source], tmp_path / "plain", snapshot_dir=tmp_path / "snapshots", progress=False, snapshots=False
    )
    (plain,) = again.timings.values()
    assert set(plain) == {REPLAY}  # no snapshot taken, nothing replayed twice
