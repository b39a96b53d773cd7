"""``themisto run --ray``: episodes on Ray actors score the same samples as a run on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.run.config import RunConfig
from themisto_env.run.results import read_results
from themisto_env.run.runner import run

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'themisto-env[ray]'")


@pytest.mark.slow
def test_ray_run_on_a_local_instance_matches_a_local_run(env_dataset: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"agent: retrieval\ntask: output\nenv:\n  snapshot_dir: {env_dataset['snapshot_dir']}\n")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--config",
            str(config),
            "--data",
            env_dataset["dataset"],
            "--ray",
            "local",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "ray"),
        ],
    )
    assert result.exit_code == 0, result.output
    plain = run(
        RunConfig(
            agent="retrieval",
            task="output",
            data=env_dataset["dataset"],
            env={"snapshot_dir": env_dataset["snapshot_dir"]},
        ),
        tmp_path / "plain",
        progress=False,
    )
    on_ray = {r.sample_id: r for r in read_results(tmp_path / "ray")}
    local = {r.sample_id: r for r in read_results(tmp_path / "plain")}
    assert sorted(on_ray) == sorted(local) and len(local) == plain["samples"] > 0
    assert all(on_ray[k].scores == local[k].scores for k in local)
    assert all(on_ray[k].prediction == local[k].prediction for k in local)
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    for metric in ("exact_match", "rouge_l", "chrf"):
        assert summary[metric]["mean"] == pytest.approx(plain[metric]["mean"])


def test_ray_option_is_in_the_run_help() -> None:
    result = CliRunner().invoke(app, ["run", "--help"])
    assert "--ray" in result.output
