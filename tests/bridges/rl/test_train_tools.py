"""The multi-turn GRPO example really trains through TRL's environment_factory: real kernels answer the
tools, a GRPO group shares one, and the reward curve is written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bridges.rl.conftest import train_example

pytest.importorskip("trl", reason="the rl extra is not installed: pip install 'themisto-env[rl]'")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_multi_turn_grpo_example_trains_and_plots_the_reward_curve(
    split_training_data: dict[str, str], tmp_path: Path
) -> None:
    steps = 2
    done = train_example("train_grpo_tools.py", tmp_path, split_training_data, "--steps", str(steps), "--samples", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr, done.stderr[-3000:]  # no library warnings left for the reader
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["rewards"]) == steps and len(summary["tool_calls"]) == steps
    assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in summary["rewards"])
    assert summary["warm_start_loss"][1] < summary["warm_start_loss"][0], "the warm start learned"
    assert 1 <= summary["kernels"] <= 4, "one kernel per sample in flight, not per rollout"
    assert 1e4 < summary["parameters"] < 1e6
    history = json.loads((tmp_path / "log_history.json").read_text())
    logged = [row for row in history if "reward" in row]
    assert [row["step"] for row in logged] == list(range(1, steps + 1))
    assert all("rewards/ThemistoToolEnv/mean" in row for row in logged), "get_reward is TRL's reward column"
    png = (tmp_path / "reward_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    # trained on the split's train side, evaluated on its test side (trainer.evaluate, the test side's states)
    from themisto_env.replay.dataset import Dataset

    dataset = Dataset.open(split_training_data["dataset"])
    test = summary["test"]
    assert {sid.rsplit("/", 2)[0] for sid in summary["train_sample_ids"]} <= set(dataset.view("train").trajectories)
    assert {sid.rsplit("/", 2)[0] for sid in test["sample_ids"]} == set(dataset.view("test").trajectories)
    assert test["samples"] > 0 and math.isfinite(test["reward"]) and -1.0 <= test["reward"] <= 1.0
