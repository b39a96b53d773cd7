"""compare and report on real runs; the report is opened in headless Chromium."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.errors import DataError
from themisto_env.metrics import METRICS, Score, aggregate, compare_paired
from themisto_env.run.compare import compare_runs, scored_rows
from themisto_env.run.config import RunConfig
from themisto_env.run.report import render_report
from themisto_env.run.runner import run

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def two_runs(env_dataset: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    for name, agent in (("static", "repeat-previous"), ("tools", "runtime-rules")):
        config = RunConfig(
            agent=agent, task="output", data=env_dataset["dataset"], env={"snapshot_dir": env_dataset["snapshot_dir"]}
        )
        run(config, root / name, progress=False)
    return root / "static", root / "tools"


def test_compare_pairs_the_same_samples(two_runs: tuple[Path, Path]) -> None:
    static, tools = two_runs
    result = compare_runs(static, tools)
    rows_a = [json.loads(line) for line in (static / "results.jsonl").read_text().splitlines()]
    assert result["shared_samples"] == len(rows_a)
    rouge = result["metrics"]["rouge_l"]
    assert rouge["mean_diff"] == pytest.approx(rouge["mean_a"] - rouge["mean_b"])
    assert rouge["wins"] + rouge["ties"] + rouge["losses"] == result["shared_samples"]
    assert rouge["ci_low"] <= rouge["mean_diff"] <= rouge["ci_high"]
    for example in result["b_wins_most"]:
        assert example["rouge_l_b"] > example["rouge_l_a"]


def test_compare_reads_rows_with_more_scores(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Rows may hold scores beyond the text metrics (the API sequence's): compare uses the text metrics."""
    rows = [json.loads(line) for line in (two_runs[0] / "results.jsonl").read_text().splitlines()]
    (tmp_path / "results.jsonl").write_text(
        "".join(json.dumps({**r, "scores": {**r["scores"], "api_sequence_f1": 0.5}}) + "\n" for r in rows)
    )
    assert compare_runs(tmp_path, two_runs[1])["metrics"] == compare_runs(two_runs[0], two_runs[1])["metrics"]


def test_compare_refuses_runs_without_shared_samples(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no results"):
        compare_runs(two_runs[0], tmp_path)


def test_cli_compare_and_report(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    static, tools = two_runs
    shown = CliRunner().invoke(app, ["compare", str(static), str(tools)])
    assert shown.exit_code == 0, shown.output
    assert "rouge_l" in shown.output and "runtime-rules" in shown.output
    out = tmp_path / "report.html"
    made = CliRunner().invoke(app, ["report", str(static), str(tools), "--out", str(out)])
    assert made.exit_code == 0, made.output
    page = out.read_text()
    assert page.count("data:image/png;base64,") >= 2
    assert "repeat-previous (static)" in page and "runtime-rules (tools)" in page


def test_a_report_of_several_runs_goes_to_a_folder_of_its_own(two_runs: tuple[Path, Path]) -> None:
    static, tools = two_runs
    made = CliRunner().invoke(app, ["report", str(static), str(tools)])
    assert made.exit_code == 0, made.output
    assert (static.parent / "static+tools" / "report.html").exists()
    assert not (static / "report.html").exists(), "a report of two runs is not inside the first run's folder"


def test_report_open_opens_it_in_the_browser(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """``--open`` goes through webbrowser: BROWSER names a command that writes the address it is given."""
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.py"
    browser.write_text(f"import sys, pathlib; pathlib.Path({str(opened)!r}).write_text(sys.argv[1])\n")
    out = tmp_path / "report.html"
    env = {**os.environ, "BROWSER": f"{sys.executable} {browser} %s", "DISPLAY": ":0"}
    command = [sys.executable, "-m", "themisto_env.cli", "report", str(two_runs[0]), "--out", str(out), "--open"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    for _ in range(100):  # webbrowser starts the command and does not wait for it
        if opened.exists():
            break
        time.sleep(0.1)
    assert opened.read_text() == out.resolve().as_uri()


def test_report_shows_the_paired_comparison(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    static, tools = two_runs
    result = compare_runs(static, tools)
    page = render_report([static, tools])
    section = page[page.index("<h2>Paired comparison</h2>") : page.index("<h2>Metrics by run</h2>")]
    assert f"{result['shared_samples']} shared samples in {result['shared_trajectories']} trajectories" in section
    for metric, d in result["metrics"].items():
        row = section[section.index(f"<td>{metric}</td>") :].split("</tr>")[0]
        assert f"{d['mean_diff']:+.3f}" in row and f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]" in row
        assert f"{d['wins']} / {d['ties']} / {d['losses']}" in row
        assert ("yes" if d["significant"] else "no") in row
    assert "<h2>Paired comparison</h2>" not in render_report([static])


def test_report_shows_the_runs_data(two_runs: tuple[Path, Path], env_dataset: dict[str, str], tmp_path: Path) -> None:
    """The runs' dataset once (both runs used it): its totals and the plot of kept and dropped samples."""
    from themisto_env.data.corpus import corpus_table
    from themisto_env.data.trajectory import read_trajectories

    page = render_report(list(two_runs))
    section = page[page.index("<h2>The data</h2>") : page.index("<h2>Hardest samples")]
    assert section.count("<h3>") == 1 and env_dataset["dataset"] in section
    total = corpus_table(read_trajectories(env_dataset["dataset"])).total
    assert f"{total.executions} executions" in section
    assert f"output {total.kept['output']} kept, {total.dropped_total('output')} dropped" in section
    image = section[section.index("base64,") + len("base64,") :].split('"')[0]
    assert base64.b64decode(image).startswith(b"\x89PNG")
    moved = tmp_path / "run"
    shutil.copytree(two_runs[0], moved)
    config = json.loads((moved / "config.json").read_text())
    (moved / "config.json").write_text(json.dumps({**config, "data": str(tmp_path / "gone")}))
    assert "<h2>The data</h2>" not in render_report([moved])  # a dataset no longer there: no section


def test_compare_resamples_trajectories(two_runs: tuple[Path, Path]) -> None:
    """compare's interval is the trajectory bootstrap of compare_paired (not the sample bootstrap)."""
    static, tools = two_runs
    a, b = scored_rows(static), scored_rows(tools)
    shared = sorted(set(a) & set(b))
    scores_a = [Score(**{m: a[s].scores[m] for m in METRICS}) for s in shared]
    scores_b = [Score(**{m: b[s].scores[m] for m in METRICS}) for s in shared]
    expected = compare_paired(scores_a, scores_b, groups=[a[s].trajectory_id for s in shared]).rouge_l
    got = compare_runs(static, tools)
    rouge = got["metrics"]["rouge_l"]
    assert (rouge["ci_low"], rouge["ci_high"]) == (expected.ci_low, expected.ci_high)
    # The fixture's notebook is one trajectory: nothing to resample, so a zero-width interval that is not
    # taken as significant (the sample bootstrap would claim a difference).
    assert got["shared_trajectories"] == 1 and len(shared) > 1
    assert rouge["ci_low"] == rouge["ci_high"] == rouge["mean_diff"] != 0
    assert not any(d["significant"] for d in got["metrics"].values())
    assert compare_paired(scores_a, scores_b).rouge_l.significant


def test_summary_resamples_trajectories(two_runs: tuple[Path, Path]) -> None:
    """summary.json's intervals are the trajectory bootstrap of aggregate, like compare's."""
    rows = list(scored_rows(two_runs[1]).values())
    expected = aggregate(
        [Score(**{m: r.scores[m] for m in METRICS}) for r in rows], groups=[r.trajectory_id for r in rows]
    )
    summary = json.loads((two_runs[1] / "summary.json").read_text())
    for metric in METRICS:
        got = summary[metric]
        estimate = getattr(expected, metric)
        assert (got["mean"], got["ci_low"], got["ci_high"]) == (estimate.mean, estimate.ci_low, estimate.ci_high)


def test_report_renders_in_headless_chromium(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (bash scripts/setup.sh installs it)")
    out = tmp_path / "report.html"
    CliRunner().invoke(app, ["report", *map(str, two_runs), "--out", str(out)])
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,2400",
            f"--screenshot={shot}",
            out.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    from PIL import Image

    image = Image.open(shot).convert("L")
    assert image.size == (1200, 2400)
    dark = sum(image.histogram()[:128])
    assert dark > 0.01 * image.size[0] * image.size[1], "the page rendered (almost) blank"
