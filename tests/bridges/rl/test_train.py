"""The GRPO example really trains: a tiny model, a few TRL steps on the env's reward, a reward curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bridges.rl.conftest import train_example

pytest.importorskip("trl", reason="the rl extra is not installed: pip install 'themisto-env[rl]'")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_grpo_example_trains_and_plots_the_reward_curve(split_training_data: dict[str, str], tmp_path: Path) -> None:
    steps = 6
    done = train_example("train_grpo.py", tmp_path, split_training_data, "--steps", str(steps), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr, done.stderr[-3000:]  # no library warnings left for the reader
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["rewards"]) == steps
    assert all(math.isfinite(r) and 0.0 <= r <= 1.0 for r in summary["rewards"])
    assert 1e4 < summary["parameters"] < 1e6
    history = json.loads((tmp_path / "log_history.json").read_text())
    assert [row["step"] for row in history if "reward" in row] == list(range(1, steps + 1))
    png = (tmp_path / "reward_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    # trained on the split's train side, tested on its test side: no trajectory on both
    from themisto_env.replay.dataset import Dataset

    dataset = Dataset.open(split_training_data["dataset"])
    trajectories = {
        side: {sid.rsplit("/", 2)[0] for sid in ids}
        for side, ids in (("train", summary["train_sample_ids"]), ("test", summary["test"]["sample_ids"]))
    }
    assert trajectories["train"] <= set(dataset.view("train").trajectories)
    assert trajectories["test"] == set(dataset.view("test").trajectories)
    assert summary["test"]["samples"] > 0 and 0.0 <= summary["test"]["mean_reward"] <= 1.0
