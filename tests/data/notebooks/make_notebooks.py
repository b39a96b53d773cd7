"""Write the test notebooks and execute them with nbclient in their own folder (their saved outputs).

Usage (from anywhere)::

    python tests/data/notebooks/make_notebooks.py sales writeback
    /tmp/legacy-venv/bin/python tests/data/notebooks/make_notebooks.py legacy

``legacy`` must run in a venv with ``legacy/requirements.txt`` installed (plus nbclient and ipykernel):
its saved outputs come from those older packages. See README.md.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent

CELLS: dict[str, list[str]] = {
    "sales": [
        "import pandas as pd",
        'sales = pd.read_csv("data/sales.csv")\nsales.shape',
        'regions = pd.read_csv("data/regions.csv")\n'
        'sales = sales.merge(regions, on="region")\n'
        'sales["revenue"] = sales["units"] * sales["price"]\n'
        'sales[["date", "manager", "revenue"]].head(3)',
        'totals = sales.groupby("manager")["revenue"].sum().sort_values(ascending=False)\ntotals',
        'print(f"best: {totals.index[0]} with {totals.iloc[0]:.2f}")',
        'big = sales[sales["units"] > 10]\nlen(big)',
        'big["product"].value_counts().sort_index().to_dict()',
    ],
    "writeback": [
        "import os\nimport pandas as pd",
        'm = pd.read_csv("data/measurements.csv")\n'
        'summary = m.groupby("sensor")["reading"].agg(["count", "mean"]).round(2)\n'
        "summary",
        'os.makedirs("out", exist_ok=True)\nsummary.to_csv("out/summary.csv")\nsorted(os.listdir("out"))',
        'with open("notes.txt", "w") as f:\n    f.write("first run\\n")\nprint(open("notes.txt").read())',
        'back = pd.read_csv("out/summary.csv", index_col="sensor")\nback.equals(summary)',
        'with open("notes.txt", "a") as f:\n    f.write(f"{len(back)} sensors\\n")\nprint(open("notes.txt").read())',
        'os.remove("data/measurements.csv")\nsorted(os.listdir("data"))',
        'total = int(back["count"].sum())\ntotal',
    ],
    "legacy": [
        'import warnings\n\nimport pandas as pd\n\nwarnings.simplefilter("ignore", FutureWarning)\npd.__version__',
        'scores = pd.read_csv("data/scores.csv")\n'
        'scores = scores.append({"name": "ivy", "team": "a", "score": 88}, ignore_index=True)\n'
        "len(scores)",
        'means = scores.groupby("team").mean()\nmeans',
        "for column, values in scores.iteritems():\n    print(column, values.dtype)",
        'round(scores["score"].mad(), 3)',
        'best = scores.loc[scores["score"].idxmax(), "name"]\nbest',
    ],
}


def make(name: str) -> Path:
    """Write ``NAME/NAME.ipynb``, executed in a copy of ``NAME/`` (what its cells write or remove stays
    in the copy)."""
    folder = HERE / name
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, source in enumerate(CELLS[name]):
        cell = nbformat.v4.new_code_cell(source)
        cell.id = hashlib.sha256(f"{name}-{i}".encode()).hexdigest()[:32]
        nb.cells.append(cell)
    with tempfile.TemporaryDirectory() as tmp:
        copy = shutil.copytree(folder, Path(tmp) / name)
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(copy)}}).execute()
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["sales", "writeback"]:
        print(make(arg))
