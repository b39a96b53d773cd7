"""``themisto data build --workers N`` and ``--ray ADDRESS``: the dataset a build on several kernels leaves
is the one a build on one kernel leaves (same trajectories in the same order: steps, outputs, fingerprints,
agreement, snapshot digests; only the measured time and memory differ), also after a kill and a resume;
bad values and a full snapshot store end in one line.

The sources are small on purpose (4 sessions, 16 executions: a JuNE log of two sessions, one of them
with a recorded interrupt, a CSV log, a notebook with files in its folder); the one-kernel build is made
once for the module.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import needs, wait_for
from themisto_env.build.builder import build_dataset
from themisto_env.data.trajectory import MANIFEST, TRAJECTORIES
from themisto_env.sandbox.store.snapshot_store import SnapshotStore

DATA = Path(__file__).parents[1] / "fixtures"
SOURCES = [DATA / "june_small.jsonl", DATA / "june_small.csv", DATA / "small.ipynb"]
THEMISTO = [sys.executable, "-c", "from themisto_env.cli import main; main()"]
MEASURED = ("duration_s", "memory_bytes")
"""What a replay measures rather than records: the only fields allowed to differ between two builds."""


def replayed(folder: Path) -> list[dict[str, Any]]:
    """A dataset's trajectories, in file order, without what a replay measures."""
    trajectories = [json.loads(line) for line in (folder / TRAJECTORIES).read_text().splitlines()]
    for trajectory in trajectories:
        for step in trajectory["steps"]:
            for key in MEASURED:
                step.pop(key)
    return trajectories


def manifest(folder: Path) -> dict[str, Any]:
    """A dataset's manifest without its creation time."""
    data = json.loads((folder / MANIFEST).read_text())
    data.pop("created")
    return data


def assert_same_dataset(built: Path, reference: Path, store: Path) -> None:
    """Same trajectories in the same order, same manifest, and every snapshot they name in ``store``."""
    mine, expected = replayed(built), replayed(reference)
    assert [t["id"] for t in mine] == [t["id"] for t in expected]
    for trajectory, wanted in zip(mine, expected, strict=True):
        assert trajectory == wanted, f"{trajectory['id']} differs from the one-kernel build's"
    assert manifest(built) == manifest(reference)
    digests = {s["snapshot"] for t in mine for s in t["steps"] if s["snapshot"]}
    assert digests and all(d in SnapshotStore(store) for d in digests)


@pytest.fixture(scope="module")
def one_kernel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sources built one session after another in one kernel (what the others must equal)."""
    root = tmp_path_factory.mktemp("one-kernel")
    report = build_dataset(SOURCES, root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert len(report.built) == 4 and not report.failed, report
    assert any(s["interrupted"] for t in replayed(root / "dataset") for s in t["steps"])
    return {"dataset": root / "dataset", "snapshots": root / "snapshots"}


@pytest.mark.slow
def test_two_workers_build_what_one_kernel_builds(one_kernel: dict[str, Path], tmp_path: Path) -> None:
    report = build_dataset(
        SOURCES, tmp_path / "dataset", snapshot_dir=tmp_path / "snapshots", progress=False, workers=2
    )
    assert len(report.built) == 4 and not report.failed and report.steps == 16
    assert_same_dataset(tmp_path / "dataset", one_kernel["dataset"], tmp_path / "snapshots")
    again = build_dataset(SOURCES, tmp_path / "dataset", snapshot_dir=tmp_path / "snapshots", workers=2)
    assert len(again.skipped) == 4 and not again.built, "a second build finds everything built"


def _kernels_of(folder: Path) -> list[int]:
    """Processes whose command line names ``folder`` (kernels whose run directory is there)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and proc.name != str(os.getpid()):
            try:
                if str(folder).encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_a_killed_build_resumes_and_ends_the_same(one_kernel: dict[str, Path], tmp_path: Path) -> None:
    out, cache = tmp_path / "dataset", tmp_path / "cache"  # the CLI's snapshot store is the cache's
    scratch = Path(tempfile.mkdtemp(prefix="k-"))  # the build's kernels' run directories (short: IPC paths)
    env = {**os.environ, "THEMISTO_CACHE": str(cache), "TMPDIR": str(scratch)}
    build = [*THEMISTO, "data", "build", *map(str, SOURCES), "--out", str(out), "--workers", "2"]
    try:
        with open(tmp_path / "stderr", "w") as stderr:
            process = subprocess.Popen(build, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                written = wait_for(lambda: process.poll() is not None or _lines(out), 300)
            finally:
                process.send_signal(signal.SIGKILL)
                process.wait()
        assert written and process.returncode == -signal.SIGKILL, (tmp_path / "stderr").read_text()[-2000:]
        kept = _lines(out)
        assert 1 <= len(kept) < 4, "killed after its first trajectory, the build had more to do"
        assert wait_for(lambda: not _kernels_of(scratch), 30), "the killed build's kernels outlived it"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    env["TMPDIR"] = os.environ["TMPDIR"]  # the test session's, whose leftovers are checked at its end
    done = subprocess.run(build, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"skipped {len(kept)} already built" in done.stdout
    assert_same_dataset(out, one_kernel["dataset"], cache / "snapshots")


def _lines(out: Path) -> list[str]:
    """The trajectories a build has written so far."""
    return (out / TRAJECTORIES).read_text().splitlines() if (out / TRAJECTORIES).exists() else []


def test_bad_worker_counts_are_one_line(tmp_path: Path) -> None:
    for value in ("0", "-2"):
        done = subprocess.run(
            [*THEMISTO, "data", "build", str(SOURCES[1]), "--out", str(tmp_path / "x"), "--workers", value],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr
        (line,) = [line for line in done.stderr.splitlines() if line.strip()]
        assert "--workers" in line and "1 or more" in line
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_snapshot_store_stops_the_build_in_one_line(tmp_path: Path, workers: str) -> None:
    from tests.data.test_full_disk import error_lines, tmpfs

    out = tmp_path / "dataset"
    with tmpfs(tmp_path / "cache", "16k") as cache:
        done = subprocess.run(
            [*THEMISTO, "data", "build", *map(str, SOURCES), "--out", str(out), "--workers", workers],
            env={**os.environ, "THEMISTO_CACHE": str(cache)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = error_lines(done)
    assert "no space left" in line and str(cache) in line and "run the same command again" in line
    kept = (out / TRAJECTORIES).read_text().splitlines() if (out / TRAJECTORIES).exists() else []
    assert all(json.loads(row)["complete"] for row in kept), "no trajectory cut short by the full store is kept"


# -- Ray ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
@needs("ray")
def ray_instance() -> Iterator[Any]:
    """The ray module, after ``pytest.importorskip`` (the build starts and stops its own instance)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'themisto-env[ray]'")
    assert not ray.is_initialized()
    yield ray
    if ray.is_initialized():
        ray.shutdown()


def test_a_ray_build_builds_what_one_kernel_builds(
    one_kernel: dict[str, Path], ray_instance: Any, tmp_path: Path
) -> None:
    report = build_dataset(
        SOURCES, tmp_path / "dataset", snapshot_dir=tmp_path / "snapshots", progress=False, workers=2, ray="local"
    )
    assert len(report.built) == 4 and not report.failed
    assert not ray_instance.is_initialized(), "the build shuts down the Ray instance it started"
    assert_same_dataset(tmp_path / "dataset", one_kernel["dataset"], tmp_path / "snapshots")


def test_ray_kernels_run_with_this_machines_thread_settings(ray_instance: Any, tmp_path: Path) -> None:
    """Ray sets OMP_NUM_THREADS=1 in its actors; kernels started there run as they would here (a thread count
    changes results: scikit-learn's nearest neighbours break distance ties by it)."""
    import nbformat

    notebook = tmp_path / "threads.ipynb"
    cell = "import os\nprint(os.environ.get('OMP_NUM_THREADS'))"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(cell, execution_count=1)]
    nbformat.write(nb, notebook)
    printed = []
    for name, ray in (("here", None), ("ray", "local")):
        out = tmp_path / name
        build_dataset([notebook], out, snapshots=False, snapshot_dir=tmp_path / "snapshots", progress=False, ray=ray)
        (trajectory,) = replayed(out)
        printed.append(trajectory["steps"][0]["outputs"])
    assert printed[0] == printed[1]


def test_a_ray_node_with_its_own_store_sends_its_snapshots(
    one_kernel: dict[str, Path], ray_instance: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actors whose cache is elsewhere (a node without a shared folder) write snapshots there; the driver's
    store ends with every one, and a lost actor's session is replayed by another."""
    node_cache, driver_cache = tmp_path / "node-cache", tmp_path / "driver-cache"
    monkeypatch.setenv("THEMISTO_CACHE", str(driver_cache))
    ray_instance.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"THEMISTO_CACHE": str(node_cache)}},
    )
    report = build_dataset(SOURCES, tmp_path / "dataset", progress=False, workers=2, ray="auto")
    assert len(report.built) == 4 and not report.failed
    assert ray_instance.is_initialized(), "a Ray instance the build did not start is left running"
    assert set(SnapshotStore(node_cache / "snapshots")), "the actors wrote to their own store"
    assert_same_dataset(tmp_path / "dataset", one_kernel["dataset"], driver_cache / "snapshots")
    ray_instance.shutdown()


def test_a_lost_ray_worker_loses_no_session(one_kernel: dict[str, Path], ray_instance: Any, tmp_path: Path) -> None:
    """An actor killed while it replays a session (as when its node is lost): the session is replayed by
    the other actor, the dataset is the one-kernel build's, and the dead actor's kernel does not outlive it."""
    import threading

    from themisto_env.build.ray_workers import ACTOR_PREFIX

    scratch = Path(tempfile.mkdtemp(prefix="r-"))  # the actors' kernels' run directories (short: IPC paths)
    ray_instance.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"TMPDIR": str(scratch)}},
    )
    out = tmp_path / "dataset"
    reports: list[Any] = []
    builder = threading.Thread(
        target=lambda: reports.append(
            build_dataset(SOURCES, out, snapshot_dir=tmp_path / "snapshots", progress=False, workers=2, ray="auto")
        )
    )
    builder.start()
    try:
        # the manifest is written once the first actor's kernel is ready; that actor is then handed the
        # longest session (a cell interrupted after 5 s)
        assert wait_for(lambda: (out / MANIFEST).exists(), 120), "no actor's kernel became ready"
        ray_instance.kill(ray_instance.get_actor(f"{ACTOR_PREFIX}{os.getpid()}-0"), no_restart=True)
    finally:
        builder.join(600)
    try:
        (report,) = reports
        assert len(report.built) == 4 and not report.failed, report.failed
        assert len(report.retried) == 1, "the killed actor's session went to the other actor"
        assert_same_dataset(out, one_kernel["dataset"], tmp_path / "snapshots")
        ray_instance.shutdown()
        assert wait_for(lambda: not _kernels_of(scratch), 30), "a killed actor's kernel outlived it"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the killed actor's run directory: a dead owner's leftover
