"""Fixtures of the RL bridge tests: what a training run needs, so that its tests are marked ``training``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs


@pytest.fixture
@needs("training")
def training_data(env_dataset: dict[str, str]) -> dict[str, str]:
    """The env tests' dataset to train on; skips with the install hint where the rl extra (TRL) is missing."""
    pytest.importorskip("trl", reason="the rl extra is not installed: pip install 'themisto-env[rl]'")
    return env_dataset


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def train_example(
    name: str, out: Path, data: dict[str, str], *options: str, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/NAME`` on ``data`` (its dataset and snapshot store) into ``out``, as a user would."""
    command = [sys.executable, str(EXAMPLES / name), "--out", str(out), "--data", data["dataset"]]
    command += ["--snapshot-dir", data["snapshot_dir"], *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
