"""docs/eval-set.md's published scores are a real run's: regenerated here from the bundled data, they must
equal the page (``THEMISTO_UPDATE_DOCS=1`` rewrites the page instead). And the runtime-aware agent's tools
mode beats its static mode on output prediction, with a paired interval clear of 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.run.compare import compare_runs
from themisto_env.run.evalset import GRID
from themisto_env.run.evalset_report import grid_markdown

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "eval-set.md"
START, END = "<!-- eval-set-table:start -->\n", "<!-- eval-set-table:end -->"


@pytest.mark.slow  # every bundled sample, six settings: a few minutes on two cores
def test_the_published_table_is_a_real_runs(tmp_path: Path) -> None:
    shown = CliRunner().invoke(
        app, ["eval-set", "--config", str(REPO / "configs/eval-set-offline.yaml"), "--out", str(tmp_path)]
    )
    assert shown.exit_code == 0, shown.output
    rows = json.loads((tmp_path / GRID).read_text())["rows"]
    table = grid_markdown(rows, tmp_path)
    page = PAGE.read_text(encoding="utf-8")
    before, rest = page.split(START)
    published, after = rest.split(END)
    if os.environ.get("THEMISTO_UPDATE_DOCS"):
        PAGE.write_text(before + START + table + END + after, encoding="utf-8")
    assert published == table, "docs/eval-set.md's table differs from this run's: THEMISTO_UPDATE_DOCS=1 rewrites it"

    tools = compare_runs(tmp_path / "output-tools-runtime-state", tmp_path / "output-static-runtime-state")
    for metric in ("exact_match", "rouge_l", "chrf"):
        d = tools["metrics"][metric]
        assert d["mean_diff"] > 0 and d["ci_low"] > 0 and d["significant"], metric
