"""The dataset check an env makes at its first kernel: one line naming the packages a dataset's snapshots were
written with that the kernel lacks; once per dataset and kind of kernel in a process (a node's sessions ask
once), and again for a dataset rebuilt in place (before, the first check of a path held for the process)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall


def _dataset_with_packages(root: Path, source: dict[str, str], packages: dict[str, str]) -> Path:
    folder = root / "dataset"
    if not folder.exists():
        shutil.copytree(source["dataset"], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["packages"] = {**manifest["packages"], **packages}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _warnings_after_a_tool(folder: Path, snapshot_dir: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level("WARNING", logger="themisto_env"):
        env = ThemistoEnv(dataset=str(folder), snapshot_dir=snapshot_dir, task="output")
        try:
            env.reset(options={"trajectory": 0, "sample": 1})
            env.step(ToolCall(tool="list_variables"))  # the state served: the first kernel, checked
        finally:
            env.close()
    return [r.getMessage() for r in caplog.records if "lacks packages" in r.getMessage()]


def test_a_dataset_is_checked_once_and_again_when_rebuilt_in_place(
    env_dataset: dict[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _dataset_with_packages(tmp_path, env_dataset, {"numpy": "0.0.1"})
    assert json.loads((folder / "manifest.json").read_text())["snapshots"], "the check needs snapshots"

    (first,) = _warnings_after_a_tool(folder, env_dataset["snapshot_dir"], caplog)
    assert "numpy 0.0.1 (kernel: " in first and "--backend local" in first, first
    assert _warnings_after_a_tool(folder, env_dataset["snapshot_dir"], caplog) == [], "checked once per process"

    _dataset_with_packages(tmp_path, env_dataset, {"numpy": "0.0.2"})  # rebuilt in place, other packages
    (again,) = _warnings_after_a_tool(folder, env_dataset["snapshot_dir"], caplog)
    assert "numpy 0.0.2 (kernel: " in again, again
