"""Cell file names that do not depend on the kernel's process: two kernels running the same cells show the
same warnings and tracebacks and store the same snapshot (issue 30: one digest per state)."""

from __future__ import annotations

import re
from pathlib import Path

from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.helper._process import CELL_FOLDER
from themisto_env.sandbox.rendering import render_outputs

CELLS = [
    "import warnings\ndef area(r):\n    return 3.14 * r * r\nclass Box:\n    def size(self):\n        return 2\n",
    "warnings.warn('check the units')",
    "def fails():\n    raise ValueError('no data')\nfails()",
    "import inspect\nprint(inspect.getsource(area))",
]


def _run(snapshots: Path) -> tuple[list[str], list[dict], str, int]:
    with Kernel("local", snapshot_dir=snapshots) as kernel:
        texts, outputs = [], []
        for cell in CELLS:
            result = kernel.execute(cell)
            outputs.extend(result.outputs)
            texts.append(render_outputs(result.outputs))
        digest = kernel.snapshots.save().digest
        pid = int(render_outputs(kernel.execute("print(__import__('os').getpid())").outputs))
        return texts, outputs, digest, pid


def test_two_kernels_name_cells_alike_and_store_one_snapshot(tmp_path: Path) -> None:
    first, first_outputs, first_digest, first_pid = _run(tmp_path / "a")
    second, _, second_digest, second_pid = _run(tmp_path / "b")
    assert first_pid != second_pid
    assert first == second
    assert first_digest == second_digest  # the cell-defined function and class pickle alike
    warning = first[1]
    assert warning.startswith(f"{CELL_FOLDER}/") and "UserWarning: check the units" in warning
    assert f"ipykernel_{first_pid}" not in warning
    traceback = "\n".join(next(o for o in first_outputs if o["output_type"] == "error")["traceback"])
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", traceback)
    assert "raise ValueError" in traceback  # the cell's lines are still found (linecache)
    assert "return 3.14 * r * r" in first[3]  # and inspect.getsource still works
