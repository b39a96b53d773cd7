"""Replay agreement against nbclient: does themisto's replay show what the notebook's author saw at least
as often as nbclient executing the same notebook in the same pinned environment?

For each notebook (with an optional requirements file), in one run:

(a) themisto: [`themisto_env.build.builder.build_dataset`][themisto_env.build.build_dataset] replays it (in a private
copy of its folder, in the
    kernel environment made from its requirements when it has some, else this Python); the per-step
    agreement is read back from the dataset;
(b) nbclient: ``NotebookClient`` executes a copy of it, with a copy of its folder as working directory, in
    a kernel whose kernelspec runs the same Python (the environment's venv, or this interpreter), with
    ``allow_errors=True``; each code cell themisto compares (the cells with an execution count, or every
    code cell of a notebook saved without counts) is compared to its saved outputs with the same
    `themisto_env.data.agreement.agreement`, normalised and ``raw=True``.

Notebooks: by default the three test notebooks (``tests/fixtures/notebooks``: sales, writeback, legacy with its
``requirements.txt``); ``--notebook PATH[::REQUIREMENTS]`` adds one; ``--pypi
PKG==VER:PATH_IN_SDIST[:EXTRA,EXTRA]`` downloads the package's source distribution into ``--cache`` (pip
download, nothing vendored here), unpacks it and adds the notebook at that path, with ``PKG==VER`` and the
extra requirements as its pinned environment. Environments are made with
`themisto_env.sandbox.environments.manage.create` (anonymous: known by their content id; cached).

    python benchmarks/bench_agreement.py [--no-defaults] [--notebook PATH[::REQS]]... [--pypi SPEC]...
        [--timeout 120] [--cache DIR] [--json FILE] [--details]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEST_NOTEBOOKS = ROOT / "tests" / "fixtures" / "notebooks"
DEFAULT_CACHE = Path.home() / ".cache" / "themisto-env" / "bench-agreement"


@dataclass
class Case:
    """A notebook to measure."""

    name: str
    path: Path
    requirements: Path | None = None
    origin: str = ""


@dataclass
class Side:
    """Agreement of one executor on one notebook."""

    compared: int = 0
    agree: int = 0
    agree_raw: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0
    failure: str | None = None


# --- notebooks --------------------------------------------------------------------------------------------


def parse_notebook(spec: str) -> Case:
    path, _, reqs = spec.partition("::")
    nb = Path(path).resolve()
    return Case(nb.stem, nb, Path(reqs).resolve() if reqs else None, str(path))


def fetch_pypi(spec: str, cache: Path) -> Case:
    """Download ``PKG==VER``'s sdist into the cache (once), unpack it, and return the notebook at the path."""
    pin, _, rest = spec.partition(":")
    member, _, extras = rest.partition(":")
    if "==" not in pin or not member:
        raise SystemExit(f"--pypi wants PKG==VER:PATH_IN_SDIST[:EXTRA,...], got {spec!r}")
    folder = cache / pin.replace("==", "-")
    downloads = folder / "download"
    if not downloads.is_dir() or not any(downloads.iterdir()):
        downloads.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", pin]
        subprocess.run([*cmd, "-d", str(downloads)], check=True)
    archive = next(p for p in downloads.iterdir() if p.is_file())
    unpacked = folder / "src"
    if not unpacked.is_dir():
        if archive.suffix in (".zip", ".whl"):
            with zipfile.ZipFile(archive) as z:
                z.extractall(unpacked)
        else:
            with tarfile.open(archive) as t:
                t.extractall(unpacked, filter="data")
    top = [p for p in unpacked.iterdir() if p.is_dir()]
    base = top[0] if len(top) == 1 and not (unpacked / member).exists() else unpacked
    nb = base / member
    if not nb.is_file():
        raise SystemExit(f"{pin}: no {member} in {archive.name}")
    text = "\n".join([pin, *[e for e in extras.split(",") if e]]) + "\n"
    reqs = folder / f"requirements-{hashlib.sha256(text.encode()).hexdigest()[:8]}.txt"
    reqs.write_text(text)
    return Case(f"{pin.split('==')[0]}/{nb.stem}", nb, reqs, f"PyPI sdist {archive.name}: {member}")


# --- environments -----------------------------------------------------------------------------------------


def environment_for(case: Case) -> tuple[str | None, str]:
    """The environment id (None: this Python) and the Python that runs the notebook's kernel."""
    if case.requirements is None:
        return None, sys.executable
    from themisto_env.sandbox.environments.environment_spec import make_spec
    from themisto_env.sandbox.environments.manage import create

    t0 = time.perf_counter()
    record, cached = create(None, make_spec(case.requirements))
    took = time.perf_counter() - t0
    print(f"  environment {record.id} ({'cached' if cached else f'made in {took:.0f} s'}): {record.python}")
    return record.id, str(record.python)


# --- the recorded cells ------------------------------------------------------------------------------------


def compared_cells(nb: dict[str, Any]) -> tuple[list[int], bool]:
    """Indices of the code cells themisto replays and compares (see themisto_env.data.notebook), and whether the
    notebook recorded nothing at all (its steps are then ``unrecorded``)."""
    code = [i for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"]
    counted = [i for i in code if nb["cells"][i].get("execution_count") is not None]
    cells = counted or code
    nothing = not any(nb["cells"][i].get("outputs") for i in cells)
    return cells, nothing


def score(side: Side, recorded: list[dict[str, Any]], replayed: list[dict[str, Any]], label: str) -> None:
    from themisto_env.data.agreement import agreement

    verdict = agreement(recorded, replayed)
    side.compared += 1
    side.agree += verdict.agrees
    side.agree_raw += agreement(recorded, replayed, raw=True).agrees
    side.kinds[verdict.kind] += 1
    if not verdict.agrees:
        side.details.append(f"{label}: {verdict.kind}: {verdict.detail}")


# --- (a) themisto ------------------------------------------------------------------------------------------


def run_themisto(case: Case, env_id: str | None, timeout: float, scratch: Path) -> Side:
    from themisto_env.build.builder import build_dataset
    from themisto_env.data.agreement import agreement
    from themisto_env.data.trajectory import iter_trajectories
    from themisto_env.sandbox.models import SandboxLimits

    side = Side()
    out = scratch / "dataset"
    t0 = time.perf_counter()
    report = build_dataset(
        [case.path],
        out,
        snapshots=False,
        progress=False,
        environment=env_id,
        limits=SandboxLimits(timeout_s=timeout),
        snapshot_dir=scratch / "snapshots",
    )
    side.seconds = time.perf_counter() - t0
    if report.failed:
        side.failure = "; ".join(report.failed.values())
    for trajectory in iter_trajectories(out):
        for step in trajectory.steps:
            if step.agreement_kind == "unrecorded":
                continue
            side.compared += 1
            side.agree += step.agrees
            side.agree_raw += agreement(step.recorded_outputs, step.outputs, raw=True).agrees
            side.kinds[step.agreement_kind or "?"] += 1
            if not step.agrees:
                side.details.append(f"step {step.index}: {step.agreement_kind}: {step.agreement_detail}")
    return side


# --- (b) nbclient ------------------------------------------------------------------------------------------


def run_nbclient(case: Case, python: str, timeout: float, scratch: Path) -> Side:
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    side = Side()
    kernels = scratch / "kernels"
    name = "bench-agreement"
    (kernels / name).mkdir(parents=True)
    spec = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"bench-agreement ({python})",
        "language": "python",
    }
    (kernels / name / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
    km = KernelManager(kernel_name=name, kernel_spec_manager=specs)

    workdir = scratch / "nbclient-cwd"
    shutil.copytree(case.path.parent, workdir, symlinks=True)
    nb = nbformat.read(workdir / case.path.name, as_version=4)
    saved = copy.deepcopy(nb)
    cells, nothing = compared_cells(saved)
    for cell in nb.cells:  # a cell nbclient never reaches (it stopped) shows nothing, not its saved outputs
        if cell.cell_type == "code":
            cell.outputs = []
    client = NotebookClient(
        nb,
        km=km,
        kernel_name=name,
        timeout=int(timeout),
        allow_errors=True,
        record_timing=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    t0 = time.perf_counter()
    try:
        client.execute()
    except Exception as exc:  # the kernel died, a cell timed out: what ran is still compared
        side.failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:120] if str(exc).strip() else ''}"
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    side.seconds = time.perf_counter() - t0
    if nothing:
        return side
    for i in cells:
        recorded = [dict(o) for o in saved.cells[i].get("outputs", [])]
        replayed = [dict(o) for o in nb.cells[i].get("outputs", [])]
        score(side, _plain(recorded), _plain(replayed), f"cell {i}")
    return side


def _plain(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return json.loads(json.dumps(outputs))


# --- the table ---------------------------------------------------------------------------------------------


def pct(num: int, den: int) -> str:
    return f"{num}/{den} ({100 * num / den:.0f}%)" if den else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebook", action="append", default=[], metavar="PATH[::REQS]")
    parser.add_argument("--pypi", action="append", default=[], metavar="PKG==VER:PATH[:EXTRA,...]")
    parser.add_argument("--no-defaults", action="store_true", help="leave out the three test notebooks")
    parser.add_argument("--timeout", type=float, default=120.0, help="per cell, both executors (s)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where --pypi sdists go")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--details", action="store_true", help="print every disagreement")
    args = parser.parse_args()

    cases: list[Case] = []
    if not args.no_defaults:
        cases += [
            Case("sales", TEST_NOTEBOOKS / "sales" / "sales.ipynb", None, "tests/fixtures/notebooks"),
            Case("writeback", TEST_NOTEBOOKS / "writeback" / "writeback.ipynb", None, "tests/fixtures/notebooks"),
            Case(
                "legacy",
                TEST_NOTEBOOKS / "legacy" / "legacy.ipynb",
                TEST_NOTEBOOKS / "legacy" / "requirements.txt",
                "tests/fixtures/notebooks",
            ),
        ]
    cases += [parse_notebook(spec) for spec in args.notebook]
    cases += [fetch_pypi(spec, args.cache) for spec in args.pypi]

    rows = []
    for case in cases:
        print(f"{case.name}: {case.path}")
        env_id, python = environment_for(case)
        with tempfile.TemporaryDirectory(prefix="bench-agreement-") as tmp:
            (Path(tmp) / "a").mkdir()
            (Path(tmp) / "b").mkdir()
            ours = run_themisto(case, env_id, args.timeout, Path(tmp) / "a")
            theirs = run_nbclient(case, python, args.timeout, Path(tmp) / "b")
        print(f"  themisto {ours.seconds:.1f} s, nbclient {theirs.seconds:.1f} s")
        for label, side in (("themisto", ours), ("nbclient", theirs)):
            if side.failure:
                print(f"  {label} failed: {side.failure}")
            if args.details:
                for line in side.details:
                    print(f"  {label} {line}")
        rows.append((case, ours, theirs))

    print()
    header = ("notebook", "cells", "themisto", "nbclient", "themisto raw", "nbclient raw")
    table = [header]
    totals = [Side(), Side()]
    for case, ours, theirs in rows:
        table.append(
            (
                case.name,
                str(ours.compared if ours.compared == theirs.compared else f"{ours.compared}/{theirs.compared}"),
                pct(ours.agree, ours.compared),
                pct(theirs.agree, theirs.compared),
                pct(ours.agree_raw, ours.compared),
                pct(theirs.agree_raw, theirs.compared),
            )
        )
        for total, side in zip(totals, (ours, theirs), strict=True):
            total.compared += side.compared
            total.agree += side.agree
            total.agree_raw += side.agree_raw
            total.kinds.update(side.kinds)
    ours, theirs = totals
    table.append(
        (
            "total",
            str(ours.compared if ours.compared == theirs.compared else f"{ours.compared}/{theirs.compared}"),
            pct(ours.agree, ours.compared),
            pct(theirs.agree, theirs.compared),
            pct(ours.agree_raw, ours.compared),
            pct(theirs.agree_raw, theirs.compared),
        )
    )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for n, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        print("| " + " | ".join(cells) + " |")
        if n == 0:
            print("| " + " | ".join(["-" * widths[0]] + ["-" * (w - 1) + ":" for w in widths[1:]]) + " |")
    print()
    print("disagreement kinds, themisto:", dict(ours.kinds - Counter({"ok": 10**9})) or "none")
    print("disagreement kinds, nbclient:", dict(theirs.kinds - Counter({"ok": 10**9})) or "none")
    verdict = "reaches" if ours.agree * max(theirs.compared, 1) >= theirs.agree * max(ours.compared, 1) else "misses"
    print(f"themisto's agreement {verdict} nbclient's (same rule)")
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "notebook": case.name,
                        "path": str(case.path),
                        "origin": case.origin,
                        "requirements": str(case.requirements) if case.requirements else None,
                        **{
                            label: {
                                "compared": side.compared,
                                "agree": side.agree,
                                "agree_raw": side.agree_raw,
                                "kinds": dict(side.kinds),
                                "details": side.details,
                                "seconds": round(side.seconds, 1),
                                "failure": side.failure,
                            }
                            for label, side in (("themisto", ours_), ("nbclient", theirs_))
                        },
                    }
                    for case, ours_, theirs_ in rows
                ],
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
