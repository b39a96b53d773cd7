"""Fixtures of the RL bridge tests: what a training run needs, so that its tests are marked ``training``."""

from __future__ import annotations

import pytest

from tests.conftest import needs


@pytest.fixture
@needs("training")
def training_data(env_dataset: dict[str, str]) -> dict[str, str]:
    """The env tests' dataset to train on; skips with the install hint where the rl extra (TRL) is missing."""
    pytest.importorskip("trl", reason="the rl extra is not installed: pip install 'themisto-env[rl]'")
    return env_dataset
