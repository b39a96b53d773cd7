"""pass@k: the unbiased estimator, K predictions per sample in the runner, the summary, the CLI, the report."""

from __future__ import annotations

import itertools
import json
from math import comb
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from themisto_env.agents import BaseAgent
from themisto_env.cli import app
from themisto_env.env.actions import Prediction
from themisto_env.env.config import EnvConfig
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import ConfigError
from themisto_env.run.config import RunConfig, load_run_config
from themisto_env.run.report import render_report
from themisto_env.run.results import RESULTS, ResultRow, read_results
from themisto_env.run.runner import run
from themisto_env.run.summary import summarize
from themisto_env.scoring.passk import k_values, pass_at_k, summarize_draws

# -- the estimator ---------------------------------------------------------------------------------------


def test_known_values() -> None:
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(2, 1, 2) == 1.0
    assert pass_at_k(200, 0, 100) == 0.0


@pytest.mark.parametrize("n", range(1, 8))
def test_matches_enumerating_every_k_subset(n: int) -> None:
    for c in range(n + 1):
        draws = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(draws, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_large_n_is_stable() -> None:
    value = pass_at_k(1000, 7, 500)
    assert 0.99 < value <= 1.0
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 6), (5, 2, 0), (5, 6, 1), (5, -1, 1), (0, 0, 1)])
def test_out_of_range_arguments_raise(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_k_values_are_one_powers_of_two_and_k() -> None:
    assert k_values(1) == [1]
    assert k_values(2) == [1, 2]
    assert k_values(3) == [1, 2, 3]
    assert k_values(8) == [1, 2, 4, 8]
    assert k_values(10) == [1, 2, 4, 8, 10]


# -- the summary, on made-up rows ------------------------------------------------------------------------


def _draw(passed: bool | None, rouge: float, failed: str | None = None) -> dict[str, Any]:
    return {
        "prediction": "x",
        "scores": {"exact_match": float(rouge == 1.0), "rouge_l": rouge, "chrf": rouge / 2},
        "reward": rouge,
        "execution_score": None if passed is None else (1.0 if passed else 0.0),
        "passed": passed,
        "prediction_failed": failed,
        "tool_calls": [],
    }


def _row(sample: int, draws: list[dict[str, Any]], **flags: Any) -> dict[str, Any]:
    first = draws[0]
    return {
        "sample_id": f"t/next-cell/{sample}",
        "trajectory_id": "t",
        "step": sample,
        "agent": "a",
        "task": "next-cell",
        "observation": "static",
        "backend": "local",
        "prediction": first["prediction"],
        "target": "y",
        "scores": first["scores"],
        "reward": first["reward"],
        "tool_calls": [],
        "seconds": 0.1,
        "prediction_failed": first["prediction_failed"],
        "draws": draws,
        **flags,
    }


def test_summary_reports_the_mean_estimate_and_best_of_k() -> None:
    rows = [
        _row(1, [_draw(True, 1.0), _draw(False, 0.2), _draw(True, 0.9), _draw(False, 0.1)]),
        _row(2, [_draw(False, 0.3), _draw(False, 0.5), _draw(False, 0.4), _draw(True, 0.8)]),
        # a draw whose own code failed is not passed, whatever it says
        _row(3, [_draw(True, 0.6, failed="timeout"), _draw(False, 0.1), _draw(False, 0.0), _draw(False, 0.2)]),
        _row(4, [_draw(True, 1.0)] * 4, infrastructure_error="the kernel died"),  # out, as today
        _row(5, [_draw(True, 1.0)] * 4, state_mismatch="x differs"),  # out, as today
    ]
    summary = summarize([ResultRow.model_validate(r) for r in rows])
    assert summary["samples"] == 3 and summary["draws"] == 4
    assert set(summary["pass_at_k"]) == {"1", "2", "4"}
    counted = [(4, 2), (4, 1), (4, 0)]
    for k in (1, 2, 4):
        estimate = summary["pass_at_k"][str(k)]
        mean = sum(pass_at_k(n, c, k) for n, c in counted) / len(counted)
        assert estimate["mean"] == pytest.approx(mean)
        assert estimate["ci_low"] <= estimate["mean"] <= estimate["ci_high"]
    assert summary["pass_at_k"]["1"]["mean"] == pytest.approx(3 / 12)
    assert summary["pass_at_k_counts"] == {"samples": 3, "draws": 12, "passed": 3, "prediction_failures": 1}
    best = summary["best_of_k"]
    assert best["rouge_l"]["mean"] == pytest.approx((1.0 + 0.8 + 0.6) / 3)
    assert best["exact_match"]["mean"] == pytest.approx(1 / 3)
    assert best["chrf"]["ci_low"] <= best["chrf"]["mean"] <= best["chrf"]["ci_high"]
    assert summary["rouge_l"]["mean"] == pytest.approx((1.0 + 0.3 + 0.6) / 3), "top-level: the first draws"


def test_rows_without_execution_scores_get_best_of_k_only() -> None:
    rows = [_row(1, [_draw(None, 0.5), _draw(None, 0.7)]), _row(2, [_draw(None, 0.1), _draw(None, 0.0)])]
    summary = summarize_draws(rows)
    assert summary["draws"] == 2 and "pass_at_k" not in summary
    assert summary["best_of_k"]["rouge_l"]["mean"] == pytest.approx(0.4)
    assert summarize_draws([{k: v for k, v in rows[0].items() if k != "draws"}]) == {}


def test_attempts_go_in_attempts_not_in_env_options() -> None:
    for name in ("attempts", "samples"):
        with pytest.raises(ConfigError, match="attempts"):
            RunConfig(env={name: 3})
    with pytest.raises(ConfigError, match="attempts: Input should be greater than or equal to 1"):
        RunConfig(attempts=0)


def test_samples_is_the_deprecated_name_of_attempts() -> None:
    with pytest.warns(DeprecationWarning, match="'samples' is deprecated: it is now 'attempts'"):
        assert RunConfig(samples=3).attempts == 3
    with pytest.warns(DeprecationWarning):
        assert EnvConfig(samples=2).attempts == 2
    with pytest.raises(ConfigError, match="give only attempts"):
        RunConfig(samples=3, attempts=2)


# -- runs with the real env ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, Path, dict[str, Any]]:
    """repeat-previous on the first bundled samples, 3 predictions each, execution-scored (local)."""
    out = tmp_path_factory.mktemp("pass-at-k") / "run"
    config = RunConfig(agent="repeat-previous", attempts=3, limit=2, env={"execution_score": True})
    return config, out, run(config, out, progress=False)


@pytest.mark.slow
def test_a_run_writes_one_row_per_sample_with_its_draws(bundled_run: tuple[RunConfig, Path, dict]) -> None:
    config, out, summary = bundled_run
    rows = read_results(out)
    assert len(rows) == 2 == summary["samples"]
    for row, written in zip(rows, (out / RESULTS).read_text().splitlines(), strict=True):
        assert row.draws is not None and len(row.draws) == 3
        assert {d.prediction for d in row.draws} == {row.prediction}, "a deterministic agent repeats"
        first = row.draws[0]
        assert first.scores == row.scores and first.execution_score == row.execution_score
        for draw in json.loads(written)["draws"]:  # as results.jsonl holds them
            assert set(draw) == {
                "prediction",
                "scores",
                "reward",
                "execution_score",
                "passed",
                "prediction_failed",
                "tool_calls",
                "usage",
                "transcript",
            }
            assert isinstance(draw["passed"], bool) and draw["execution_score"] is not None
    assert summary["draws"] == 3
    assert set(summary["pass_at_k"]) == {"1", "2", "3"}
    fractions = [sum(bool(d.passed) for d in r.draws or ()) / 3 for r in rows]
    assert summary["pass_at_k"]["1"]["mean"] == pytest.approx(sum(fractions) / len(fractions))
    assert set(summary["best_of_k"]) == {"exact_match", "rouge_l", "chrf"}
    assert json.loads((out / "summary.json").read_text()) == summary


@pytest.mark.slow
def test_resuming_the_run_adds_no_rows(bundled_run: tuple[RunConfig, Path, dict]) -> None:
    config, out, summary = bundled_run
    before = (out / RESULTS).read_text()
    again = run(config, out, progress=False)
    assert (out / RESULTS).read_text() == before
    assert again["pass_at_k"] == summary["pass_at_k"]


@pytest.mark.slow
def test_the_report_shows_pass_at_k(bundled_run: tuple[RunConfig, Path, dict]) -> None:
    _, out, _ = bundled_run
    page = render_report([out])
    assert "pass@1" in page and "pass@3" in page and "best-of-K rouge_l" in page


class AlternatingAgent(BaseAgent):
    """Right (the sample's target), wrong, right, ... across all its predictions."""

    name = "alternating"
    seen: ClassVar[list[tuple[str, Any]]] = []  # (sample id, the scored sample id in the info it was shown)

    def __init__(self, targets: dict[str, str]) -> None:
        super().__init__()
        self.targets = targets
        self.calls = 0

    def decide(self, observation: Any, info: Any) -> Prediction:
        self.calls += 1
        self.seen.append((info["sample_id"], info.get("scored_sample_id")))
        right = self.calls % 2 == 1
        return Prediction(text=self.targets[info["sample_id"]] if right else "zz_wrong = 1\nprint('wrong')")


@pytest.mark.slow
def test_different_draws_give_pass_at_k_above_pass_at_1(env_dataset: dict[str, str], tmp_path: Path) -> None:
    data = {"dataset": env_dataset["dataset"], "snapshot_dir": env_dataset["snapshot_dir"]}
    env = ThemistoEnv(**data)
    targets = {s.id: s.target for s in env.episode.samples}
    env.close()
    AlternatingAgent.seen.clear()
    config = RunConfig(
        agent=f"{__name__}:AlternatingAgent",
        agent_options={"targets": targets},
        data=env_dataset["dataset"],
        attempts=3,
        limit=3,
        env={"snapshot_dir": env_dataset["snapshot_dir"], "execution_score": True},
    )
    summary = run(config, tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert [[d.passed for d in r.draws or ()] for r in rows] == [
        [True, False, True],
        [False, True, False],
        [True, False, True],
    ], "the targets pass their own execution score, the wrong cell does not"
    # per sample (n, c) = (3, 2), (3, 1), (3, 2): pass@1 = 5/9; pass@2 = (1 + 2/3 + 1) / 3; pass@3 = 1
    assert summary["pass_at_k"]["1"]["mean"] == pytest.approx(5 / 9)
    assert summary["pass_at_k"]["2"]["mean"] == pytest.approx(8 / 9)
    assert summary["pass_at_k"]["3"]["mean"] == pytest.approx(1.0)
    assert summary["pass_at_k"]["2"]["mean"] > summary["pass_at_k"]["1"]["mean"]
    assert summary["best_of_k"]["exact_match"]["mean"] == 1.0
    assert summary["exact_match"]["mean"] == pytest.approx(2 / 3), "the top level is the first draw"
    assert len(AlternatingAgent.seen) == 9
    assert all(seen != sample for sample, seen in AlternatingAgent.seen), "no draw is shown an earlier one's score"


def test_a_run_with_another_k_runs_the_samples_again(env_dataset: dict[str, str], tmp_path: Path) -> None:
    base = {"data": env_dataset["dataset"], "limit": 2, "env": {"snapshot_dir": env_dataset["snapshot_dir"]}}
    run(RunConfig(**base), tmp_path, progress=False)
    assert all(r.draws is None for r in read_results(tmp_path))
    assert all("draws" not in json.loads(line) for line in (tmp_path / RESULTS).read_text().splitlines())
    summary = run(RunConfig(**base, attempts=2), tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert len(rows) == 4 and all(r.draw_count == 2 for r in rows[2:])
    assert summary["samples"] == 2 and summary["draws"] == 2 and "pass_at_k" not in summary


@pytest.mark.slow
def test_cli_run_with_samples_prints_pass_at_k(env_dataset: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"agent: repeat-previous\nenv:\n  snapshot_dir: {env_dataset['snapshot_dir']}\n")
    args = ["run", "--config", str(config), "--data", env_dataset["dataset"], "--limit", "2", "--attempts", "2"]
    result = CliRunner().invoke(app, [*args, "--execution-score", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "pass@1" in result.output and "pass@2" in result.output and "best-of-2 rouge_l" in result.output
    saved = json.loads((tmp_path / "r" / "config.json").read_text())
    assert saved["attempts"] == 2
    assert saved["env"] == {"snapshot_dir": env_dataset["snapshot_dir"], "execution_score": True}
    with pytest.raises(ConfigError, match="attempts"):
        load_run_config(None, {"attempts": 0})
