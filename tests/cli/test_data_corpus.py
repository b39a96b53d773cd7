"""``themisto data build`` and ``themisto data info`` on a dataset whose drop causes are known (issue 43): the
closing lines name the three largest, ``--json`` carries the per-notebook table, ``--plot`` draws it."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import nbformat
import pytest
from rich.console import Console
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.commands import data_corpus
from themisto_env.data.corpus import corpus_table
from themisto_env.data.trajectory import read_trajectories

pytestmark = pytest.mark.slow  # one build of 11 cells, a kernel


def _stdout(text: str) -> dict[str, Any]:
    return nbformat.v4.new_output("stream", name="stdout", text=text)


# (source, outputs saved): the replay finds no module, no files: 1 missing-module, 4 missing-file, 3 upstream
BROKEN = [
    ("import seaborn_not_installed_here as sns", []),
    *((f"{name} = open('{name}.csv').read()", []) for name in "abcd"),
    *((f"print(len({name}))", [_stdout("3\n")]) for name in "abc"),
    ("print('ok')", [_stdout("ok\n")]),
]
SHORT = [("print(1)", [_stdout("1\n")]), ("print(2)", [_stdout("2\n")])]  # under 5 executions: no samples


def _notebook(path: Path, cells: list[tuple[str, list[dict[str, Any]]]]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s, execution_count=i + 1, outputs=o) for i, (s, o) in enumerate(cells)]
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("corpus")
    sources = [str(_notebook(root / "broken.ipynb", BROKEN)), str(_notebook(root / "short.ipynb", SHORT))]
    out = root / "dataset"
    result = CliRunner().invoke(app, ["data", "build", *sources, "--out", str(out), "--no-snapshots"])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_the_build_names_the_three_largest_causes_and_prints_the_table(built: tuple[Path, str]) -> None:
    out, output = built
    text = " ".join(output.split())
    assert "next-cell 8 kept, 1 dropped; output 1 kept, 10 dropped" in text, text
    assert "largest drop causes: next-cell: short-session 1; output: missing-file 4, upstream 3, short-session 2" in (
        text
    ), text
    assert f"samples per notebook in {out}" in text
    table = output[output.index("samples per notebook") :]
    assert "broken" in table and "short.ipynb" in table and "total" in table  # names fold at 80 columns
    assert "timing: 11 executions in" in text and "executions/s per worker" in text


def test_data_info_json_carries_the_table(built: tuple[Path, str]) -> None:
    out, _ = built
    result = CliRunner().invoke(app, ["data", "info", str(out), "--json"])
    assert result.exit_code == 0, result.output
    corpus = json.loads(result.output)["corpus"]
    assert corpus == corpus_table(read_trajectories(out)).to_json()
    broken, short = corpus["notebooks"]
    assert broken["notebook"] == "broken.ipynb" and broken["executions"] == len(BROKEN)
    assert broken["top_causes"]["output"] == [["missing-file", 4], ["upstream", 3], ["missing-module", 1]]
    assert broken["kept"] == {"next-cell": len(BROKEN) - 1, "output": 1}
    assert short["dropped"] == {"next-cell": {"short-session": 1}, "output": {"short-session": 2}}
    assert corpus["total"]["executions"] == len(BROKEN) + len(SHORT)


def test_data_info_prints_the_table(built: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    wide = Console(file=io.StringIO(), width=200)  # the commands' console is 80 columns when piped
    monkeypatch.setattr(data_corpus, "console", wide)
    result = CliRunner().invoke(app, ["data", "info", str(built[0])])
    assert result.exit_code == 0, result.output
    lines = wide.file.getvalue().splitlines()
    assert "samples per notebook" in lines[0]
    row = next(line for line in lines if "broken.ipynb" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == [
        "broken.ipynb", "1", "9", "8 / 0", "1 / 8", "output: missing-file 4, upstream 3, missing-module 1"
    ]  # fmt: skip
    assert any(line.split("│")[1].strip() == "total" for line in lines if "│" in line)


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_data_info_draws_the_plot(built: tuple[Path, str], tmp_path: Path, suffix: str) -> None:
    out, _ = built
    plot = tmp_path / f"corpus.{suffix}"
    result = CliRunner().invoke(app, ["data", "info", str(out), "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    data = plot.read_bytes()
    if suffix == "png":
        import matplotlib.image

        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        width, height = matplotlib.image.imread(plot).shape[1::-1]
        assert width > 300 and height > 100
    else:
        root = ET.fromstring(data)
        assert root.tag.endswith("svg")
        assert b"missing-file" in data and b"broken.ipynb" in data  # the legend and the notebooks' names


def test_a_plot_of_another_format_is_refused(built: tuple[Path, str], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["data", "info", str(built[0]), "--plot", str(tmp_path / "corpus.gif")])
    assert result.exit_code != 0 and "give a .png or .svg file" in str(result.exception or result.output)
    assert not (tmp_path / "corpus.gif").exists()
