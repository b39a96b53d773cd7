"""A folder build (``themisto data build FOLDER --project-envs``) on 1 vs 2 kernels at once.

Run from the repository root::

    python benchmarks/bench_folder_build.py [--notebooks 4] [--cells 15] [--workers 1,2] [--rounds 2]

The folder: two projects, ``alpha`` (``requirements.txt``: six 1.16.0) and ``beta`` (``pyproject.toml``:
tabulate 0.9.0), each with ``--notebooks`` notebooks of ``--cells`` small cells (list and dict work, prints,
a file of the notebook's folder read). Their two kernel environments are made once before the timing
(made again only when missing). Each configuration is one `themisto_env.build.folder_build.build_folder`
into a fresh output folder and snapshot store; the figure is executions per second of replay
(``build_seconds``: kernel starts, replays and snapshots; environments and the import scan are outside).
Configurations alternate, the order reversed every other round; medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import nbformat

from themisto_env.build.folder_build import build_folder
from themisto_env.sandbox.environments import manage
from themisto_env.sandbox.environments.environment_spec import make_spec


def cells(project: str, n: int) -> list[str]:
    """``n`` small cells of a notebook of ``project``."""
    body = [
        "import six" if project == "alpha" else "import tabulate",
        "words = open('words.txt').read().split()",
        "counts = {w: words.count(w) for w in set(words)}",
        "ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))",
        "print(ranked[:3])",
        "squares = [i * i for i in range(2000)]",
        "total = sum(squares)",
        "total",
        "table = [[w, c] for w, c in ranked[:5]]",
        "print(len(table))",
        "evens = [s for s in squares if s % 2 == 0]",
        "len(evens)",
        "lookup = {i: str(i) for i in range(500)}",
        "lookup[42]",
        "print(total % 97)",
    ]
    return [body[i % len(body)] if i < len(body) else f"x{i} = {i} * 3\nx{i}" for i in range(n)]


def make_tree(root: Path, notebooks: int, n_cells: int) -> None:
    for project, spec_file, text in (
        ("alpha", "requirements.txt", "six==1.16.0\n"),
        ("beta", "pyproject.toml", '[project]\nname = "beta"\ndependencies = ["tabulate==0.9.0"]\n'),
    ):
        folder = root / project
        folder.mkdir(parents=True)
        (folder / spec_file).write_text(text)
        for k in range(notebooks):
            sub = folder / f"lesson{k}"
            sub.mkdir()
            (sub / "words.txt").write_text(" ".join(["red", "green", "blue", "red", f"w{k}"] * 40))
            nb = nbformat.v4.new_notebook()
            nb.cells = [
                nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(cells(project, n_cells))
            ]
            nbformat.write(nb, sub / f"lesson{k}.ipynb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notebooks", type=int, default=4, help="notebooks per project")
    parser.add_argument("--cells", type=int, default=15)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-folder-"))
    make_tree(work / "tree", args.notebooks, args.cells)
    for text in ("six==1.16.0", "tabulate==0.9.0"):
        manage.create(None, make_spec(text))
    rates: dict[int, list[float]] = {w: [] for w in counts}
    executions = 0
    for round_ in range(args.rounds):
        for workers in counts if round_ % 2 == 0 else list(reversed(counts)):
            out = work / f"out-{round_}-{workers}"
            report = build_folder(work / "tree", out, workers=workers, snapshot_dir=out / "snapshots", progress=False)
            bad = [n.notebook for n in report.notebooks if n.status != "built"]
            if bad:
                raise SystemExit(f"not built: {bad}")
            executions = report.executions
            rates[workers].append(report.executions / report.build_seconds)
            print(
                f"round {round_ + 1}, {workers} worker(s): {report.executions} executions in {report.build_seconds} s"
            )
    print()
    print(f"{2 * args.notebooks} notebooks, {executions} executions, 2 environments")
    print("| workers | executions/s (median) | speed-up |")
    print("| ---: | ---: | ---: |")
    base = statistics.median(rates[counts[0]])
    for workers in counts:
        rate = statistics.median(rates[workers])
        print(f"| {workers} | {rate:.1f} | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
