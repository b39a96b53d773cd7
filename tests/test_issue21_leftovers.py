"""Leftovers of issue 21, each with its test: the try-cell refund is capped, ``prediction_failures`` counts
every draw, the dataset format version says what the format is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from themisto_env.data.trajectory import FORMAT_VERSION, MANIFEST, read_manifest
from themisto_env.env.record import MAX_TOOL_REFUNDS
from themisto_env.env.tools import ToolCall
from themisto_env.errors import DataError, KernelStartError
from themisto_env.run.results import ResultRow
from themisto_env.run.summary import summarize


class BrokenKernels:
    """Disposable kernels that never reach the state (a fault injected: the sandbox's, not the agent's)."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise KernelStartError("the disposable kernel did not start")

    def close(self) -> None:
        pass


def test_the_try_cell_refund_is_capped(env_dataset: dict[str, str]) -> None:
    budget = 2
    env = gym.make("themisto/NextCell-v0", **env_dataset, observation="tools", tool_budget=budget).unwrapped
    try:
        env.reset(seed=0)
        env.scorer.disposable_kernels = BrokenKernels  # type: ignore[method-assign]
        calls = 0
        while calls < 20:
            calls += 1
            _, _, _, _, info = env.step(ToolCall(tool="try_cell", args={"code": "x = 1"}))
            if info.get("tool_refused"):
                break
            assert info.get("infrastructure_error"), info
        assert calls == MAX_TOOL_REFUNDS + budget + 1, "refunded up to the cap, then the budget, then refused"
    finally:
        env.close()


def _draw(failed: str | None) -> dict[str, Any]:
    scores = {"exact_match": 0.0, "rouge_l": 0.5, "chrf": 0.5}
    return {"prediction": "x", "scores": scores, "reward": 0.5, "prediction_failed": failed, "tool_calls": []}


def _row(sample: int, draws: list[dict[str, Any]] | None, failed: str | None = None) -> ResultRow:
    fields: dict[str, Any] = {
        "sample_id": f"t/next-cell/{sample}",
        "trajectory_id": "t",
        "step": sample,
        "agent": "a",
        "task": "next-cell",
        "observation": "static",
        "backend": "local",
        "prediction": "x",
        "target": "y",
        "scores": {"exact_match": 0.0, "rouge_l": 0.5, "chrf": 0.5},
        "reward": 0.5,
        "seconds": 0.1,
        "prediction_failed": draws[0]["prediction_failed"] if draws else failed,
    }
    if draws is not None:
        fields["draws"] = draws
    return ResultRow.model_validate(fields)


def test_prediction_failures_count_every_draw() -> None:
    rows = [
        _row(1, [_draw(None), _draw("timeout"), _draw("raised: ValueError")]),  # the first draw did not fail
        _row(2, [_draw("exit"), _draw(None), _draw(None)]),
        _row(3, None, failed="memory"),  # a row of one prediction
        _row(4, None),
    ]
    assert summarize(rows)["prediction_failures"] == 4


def test_the_format_version_is_written_read_and_checked(env_dataset: dict[str, str], tmp_path: Path) -> None:
    assert FORMAT_VERSION == 4  # 4: each disagreeing step's cause (issue 30)
    assert read_manifest(env_dataset["dataset"]).version == FORMAT_VERSION, "a dataset built now says 4"
    folder = shutil.copytree(env_dataset["dataset"], tmp_path / "dataset")
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "version": 3}))
    assert read_manifest(folder).version == 3, "an older dataset is still read"
    (folder / MANIFEST).write_text(json.dumps({**manifest, "version": FORMAT_VERSION + 1}))
    with pytest.raises(DataError, match="newer than this package reads") as caught:
        read_manifest(folder)
    assert "\n" not in str(caught.value)


def test_data_info_shows_the_kernel_environment_and_working_folders(
    env_dataset: dict[str, str], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from themisto_env.cli import app

    folder = shutil.copytree(env_dataset["dataset"], tmp_path / "dataset")
    manifest = json.loads((folder / MANIFEST).read_text())
    environment = {"id": "0123456789abcdef", "name": "pinned-2023", "python": "3.11", "requirements": "", "apt": []}
    manifest.update(environment=environment, workdirs={"/data/project": "f" * 64})
    (folder / MANIFEST).write_text(json.dumps(manifest))
    done = CliRunner().invoke(app, ["data", "info", str(folder), "--json"])
    assert done.exit_code == 0, done.output
    info = json.loads(done.output)
    assert info["kernel_environment"] == {"id": "0123456789abcdef", "name": "pinned-2023", "python": "3.11"}
    assert info["working_folders"] == {"/data/project": "f" * 64}
    done = CliRunner().invoke(app, ["data", "info", str(folder)], terminal_width=200)
    assert done.exit_code == 0, done.output
    assert "pinned-2023 (Python 3.11)" in done.output and "/data/project (ffffffffffff)" in done.output
    own = CliRunner().invoke(app, ["data", "info", env_dataset["dataset"]], terminal_width=200)
    assert "the tool's own Python" in own.output
