"""A small trajectory dataset for env tests: a notebook session replayed by the real builder."""

from __future__ import annotations

from pathlib import Path

import nbformat

CELLS = [
    "import numpy as np\nimport pandas as pd",
    "rng = np.random.default_rng(0)\nsales = pd.DataFrame({'region': ['north', 'south', 'east', 'west'] * 5,"
    " 'units': rng.integers(1, 50, 20)})",
    "sales.head()",
    "sales.shape",
    "def total(frame):\n    return int(frame['units'].sum())",
    "print(total(sales))",
    "by_region = sales.groupby('region')['units'].sum()\nby_region",
    "len(sales)",
    "weights = np.linspace(0, 1, 5)\nweights",
    "sales.describe()",
]


def write_notebook(path: Path) -> Path:
    """A saved notebook whose cells ran in order (outputs left empty: the replay fills them)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(CELLS)]
    nbformat.write(nb, path)
    return path
