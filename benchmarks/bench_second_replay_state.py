"""The cost of keeping the process state before every step of a build (issue 39), side by side in one run.

Run from the repository root::

    python benchmarks/bench_second_replay_state.py [--cells 40] [--rounds 3]

A second replay needs the process as the first replay found it (extensions, magics, the user's modules,
warning filters: ``keep_process_state``, one helper call before every step) and reseeds generators made with
no seed (``reseed_generators``, only in a second replay). In alternating rounds (so drift in machine load hits
both alike) it times:

* **helper calls**, on a kernel with numpy, pandas and pyplot imported and an extension loaded: the median of
  ``keep_process_state``, ``put_back_process_state`` and ``reseed_generators`` against ``1+1``;
* **a build** of a notebook of ``--cells`` agreeing cells (snapshots on), with the per-step call and with it
  left out (the build as before issue 39): the difference per step.

Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

from themisto_env.build import second_replay
from themisto_env.build.builder import build_dataset
from themisto_env.sandbox.kernel.core import Kernel


def _median_ms(run: Callable[[], Any], n: int = 100) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _notebook(folder: Path, cells: int) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import numpy as np", execution_count=1))
    for i in range(1, cells):
        out = nbformat.v4.new_output("stream", name="stdout", text=f"{i * 3}\n")
        nb.cells.append(nbformat.v4.new_code_cell(f"x{i} = np.arange(3) + {i - 1}\nprint(x{i}.sum())", outputs=[out]))
    path = folder / "steps.ipynb"
    nbformat.write(nb, path)
    return path


def _build_s(notebook: Path, root: Path, *, keep: bool) -> float:
    original = second_replay.SecondReplays.before_step

    def without_keep(self: Any, execution: Any, snapshot: Any, files: Any) -> None:
        call = self.kernel.call
        self.kernel.call = lambda name, **kw: None if name == "keep_process_state" else call(name, **kw)
        try:
            original(self, execution, snapshot, files)
        finally:
            self.kernel.call = call

    second_replay.SecondReplays.before_step = original if keep else without_keep  # type: ignore[method-assign]
    try:
        out = Path(tempfile.mkdtemp(dir=root))
        start = time.perf_counter()
        report = build_dataset([notebook], out / "dataset", snapshot_dir=out / "snapshots", progress=False)
        assert report.built and not report.failed, report
        return time.perf_counter() - start
    finally:
        second_replay.SecondReplays.before_step = original  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        notebook = _notebook(root, args.cells)
        with Kernel("local", snapshot_dir=root / "k") as kernel:
            kernel.execute("import numpy as np, pandas as pd, matplotlib.pyplot as plt\n%load_ext autoreload")
            kernel.execute("rng = np.random.default_rng()")
            for r in range(args.rounds):
                bare = _median_ms(lambda: kernel.execute("1+1"))
                keep = _median_ms(lambda: kernel.call("keep_process_state"))
                put = _median_ms(lambda: kernel.call("put_back_process_state"))
                reseed = _median_ms(lambda: kernel.call("reseed_generators"))
                print(
                    f"round {r}: 1+1 {bare:.2f} ms | keep_process_state {keep:.2f} ms ({keep / bare:.2f}x) | "
                    f"put_back_process_state {put:.2f} ms | reseed_generators {reseed:.2f} ms"
                )
        for r in range(args.rounds):
            with_keep = _build_s(notebook, root, keep=True)
            without = _build_s(notebook, root, keep=False)
            per_step = (with_keep - without) / args.cells * 1000
            print(
                f"round {r}: build of {args.cells} cells: {with_keep:.2f} s with the per-step keep, "
                f"{without:.2f} s without ({with_keep / without:.3f}x; {per_step:+.1f} ms per step)"
            )


if __name__ == "__main__":
    main()
