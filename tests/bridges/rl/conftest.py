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


@pytest.fixture(scope="session")
def split_training_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two notebooks built into one dataset, with a default split written that puts one on each side."""
    pytest.importorskip("trl", reason="the rl extra is not installed: pip install 'themisto-env[rl]'")
    import nbformat

    from tests.env_fixtures import CELLS, write_notebook
    from themisto_env.build.builder import build_dataset
    from themisto_env.data.splits import SplitRule, assign
    from themisto_env.replay.dataset import Dataset

    root = tmp_path_factory.mktemp("split-training")
    (root / "a").mkdir()
    (root / "b").mkdir()
    first = write_notebook(root / "a" / "sales.ipynb")
    second = root / "b" / "stock.ipynb"
    nb = nbformat.v4.new_notebook()
    cells = [c.replace("sales", "stock").replace("units", "items") for c in CELLS]
    nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(cells)]
    nbformat.write(nb, second)
    report = build_dataset([first, second], root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert len(report.built) == 2 and not report.failed, report
    dataset = Dataset.open(root / "dataset")
    seed = next(
        s
        for s in range(200)
        if len(
            set(assign(dataset.trajectories.values(), SplitRule(test_size=0.5, seed=s), require_both=False).values())
        )
        == 2
    )
    dataset.save_split(SplitRule(test_size=0.5, seed=seed))
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def train_example(
    name: str, out: Path, data: dict[str, str], *options: str, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/NAME`` on ``data`` (its dataset and snapshot store) into ``out``, as a user would."""
    command = [sys.executable, str(EXAMPLES / name), "--out", str(out), "--data", data["dataset"]]
    command += ["--snapshot-dir", data["snapshot_dir"], *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
