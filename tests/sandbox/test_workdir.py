"""Working folders (issue 11, part 1), end to end on the test notebooks of ``tests/fixtures/notebooks``.

A kernel runs in a private copy of the notebook's folder (or ``--workdir``): cells read files by
relative path, what they write stays in the copy, the original folder is never touched. The files are
part of the state: a state served at a late step (by snapshot, or from a fresh kernel) has the files
the earlier steps wrote, checked against the digest recorded with the step.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_backend
from themisto_env.build.builder import build_dataset
from themisto_env.data.trajectory import Trajectory, read_manifest, read_trajectories
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.errors import DataError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.pool import KernelPool
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.workdir import FileStore, FolderTooLargeError, scan, tree_digest
from themisto_env.sandbox.template.shared import close_shared_templates
from themisto_env.state.kernel import TrajectoryKernel

NOTEBOOKS = Path(__file__).parents[1] / "fixtures" / "notebooks"
WORKDIR_NOTEBOOKS = ("sales", "writeback")  # need only this project's packages
LIMIT = 10 * 2**20


def folder_digest(name: str) -> str:
    return tree_digest(scan(NOTEBOOKS / name, limit_bytes=LIMIT))


def run_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("themisto-kernel-*")}


@pytest.fixture(scope="module")
def originals() -> dict[str, str]:
    """The test notebooks' folders' digests before anything ran."""
    return {name: folder_digest(name) for name in ("sales", "writeback", "legacy")}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory, originals: dict[str, str]) -> Path:
    """The three notebooks built with the default backend, from another working directory."""
    root = tmp_path_factory.mktemp("workdir")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    before = os.getcwd()
    os.chdir(elsewhere)
    try:
        report = build_dataset(
            [NOTEBOOKS / n / f"{n}.ipynb" for n in ("sales", "writeback", "legacy")],
            root / "dataset",
            snapshot_dir=root / "snapshots",
            progress=False,
        )
    finally:
        os.chdir(before)
    assert not report.failed
    assert list(elsewhere.iterdir()) == []  # nothing written where the build was started
    return root / "dataset"


def by_name(folder: Path) -> dict[str, Trajectory]:
    return {Path(t.source_path or "").stem: t for t in read_trajectories(folder)}


def test_workdir_notebooks_replay_in_full_agreement(dataset: Path) -> None:
    trajectories = by_name(dataset)
    for name in WORKDIR_NOTEBOOKS:
        trajectory = trajectories[name]
        assert trajectory.agreement == 1.0, [(s.index, s.outputs) for s in trajectory.steps if not s.agrees]
        assert all(s.status == "ok" for s in trajectory.steps)
    legacy = trajectories["legacy"]  # its saved outputs came from pandas 1.5.3 (see the folder's README)
    assert legacy.steps[0].recorded_outputs[0]["data"]["text/plain"] == "'1.5.3'"
    import pandas

    if int(pandas.__version__.split(".")[0]) >= 2:
        assert legacy.agreement < 0.5  # DataFrame.append, iteritems, mad: gone in today's pandas


def test_manifest_records_each_folder_digest(dataset: Path, originals: dict[str, str]) -> None:
    manifest = read_manifest(dataset)
    assert manifest.workdirs == {str(NOTEBOOKS / n): originals[n] for n in ("sales", "writeback", "legacy")}
    for trajectory in read_trajectories(dataset):
        assert trajectory.workdir_digest == manifest.workdirs[trajectory.workdir or ""]
        assert all(s.files is not None for s in trajectory.steps)


def test_files_written_by_cells_are_recorded_with_each_step(dataset: Path) -> None:
    writeback = by_name(dataset)["writeback"]
    store = writeback.files_store
    assert store is not None
    trees = [store.tree(s.files or "") for s in writeback.steps]
    assert "out/summary.csv" not in trees[1] and "out/summary.csv" in trees[2]
    assert "notes.txt" in trees[3]
    assert trees[3]["notes.txt"] != trees[5]["notes.txt"]  # appended to
    assert "data/measurements.csv" in trees[5] and "data/measurements.csv" not in trees[6]
    assert store.read(trees[5]["notes.txt"], name="notes.txt") == b"first run\n3 sensors\n"


def test_without_the_folder_the_cells_fail_as_the_issue_describes(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    build_dataset(
        [NOTEBOOKS / "sales" / "sales.ipynb"],
        tmp_path / "dataset",
        snapshot_dir=tmp_path / "snapshots",
        progress=False,
        workdir=empty,
    )
    (sales,) = read_trajectories(tmp_path / "dataset")
    errors = [next((o["ename"] for o in s.outputs if o["output_type"] == "error"), None) for s in sales.steps]
    assert errors[1:3] == ["FileNotFoundError", "FileNotFoundError"]  # sales.csv, regions.csv
    assert set(errors[3:]) == {"NameError"}  # then the chain of names never defined
    assert sales.agreement == 1 / 7  # only the import agrees
    assert read_manifest(tmp_path / "dataset").workdirs == {str(empty): tree_digest({})}


def test_a_folder_above_the_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(FolderTooLargeError) as caught:
        build_dataset(
            [NOTEBOOKS / "sales" / "sales.ipynb"],
            tmp_path / "dataset",
            snapshot_dir=tmp_path / "snapshots",
            progress=False,
            limits=SandboxLimits(workdir_mb=0.001),
        )
    assert str(NOTEBOOKS / "sales") in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.slow), "bwrap", "docker"])
def test_served_states_have_the_files_of_their_step(
    dataset: Path, originals: dict[str, str], backend: str, tmp_path: Path
) -> None:
    require_backend(backend)
    writeback = by_name(dataset)["writeback"]
    snapshots = dataset.parent / "snapshots"
    owner = TrajectoryKernel(lambda: Kernel(backend, snapshot_dir=snapshots))
    seen = set()
    try:
        for step in (7, 2, 6, 0, 5):  # a late state first (by snapshot), then back, then forward
            report = owner.serve(writeback, step)
            assert report.check == "verified", report.differences
            kernel = owner.kernel
            seen.add(kernel.run_dir.name)
            work = kernel.snapshots.workdir
            assert (work / "notes.txt").exists() == (step >= 4)
            assert (work / "data" / "measurements.csv").exists() == (step <= 6)
            if step >= 6:  # the append ran once, however the state was reached
                assert (work / "notes.txt").read_text() == "first run\n3 sensors\n"
            result = kernel.execute("import os\nprint(os.getcwd() == os.environ['PWD'], sorted(os.listdir('.')))")
            assert result.outputs[0]["text"].startswith("True")
            owner.taint()  # that cell was not recorded
        # A file in the dataset that no longer matches its digest is refused, never served. (Not
        # notes.txt: restoring the snapshot's closed handle `f` rewrites that file itself.)
        store = writeback.files_store
        assert store is not None
        blob = store.blob_path(store.tree(writeback.steps[6].files or "")["out/summary.csv"])
        saved = blob.read_bytes()
        owner.serve(writeback, 1)  # no out/ yet
        owner.taint()
        blob.write_bytes(b"tampered\n")
        try:
            with pytest.raises(DataError, match=r"out/summary\.csv does not match its digest"):
                owner.serve(writeback, 7)
        finally:
            blob.write_bytes(saved)
    finally:
        owner.close()
    assert not seen & run_dirs()  # the copies went with their kernels
    assert {n: folder_digest(n) for n in originals} == originals


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_episodes_read_variables_derived_from_files(dataset: Path, originals: dict[str, str], backend: str) -> None:
    require_backend(backend)
    before = own_containers() if backend == "docker" else set()  # (another module's may run in this process)
    env = ThemistoEnv(
        dataset=str(dataset), backend=backend, task="output", snapshot_dir=str(dataset.parent / "snapshots")
    )
    try:
        for name, variable, expected in (("writeback", "back", "count"), ("sales", "totals", "Edsger")):
            tid = by_name(dataset)[name].id
            samples = env.episode.episode_samples[tid]
            env.reset(options={"trajectory": tid, "sample": len(samples) - 1})  # a late sample
            observation, _, _, _, info = env.step(ToolCall(tool="inspect_variable", args={"name": variable}))
            assert info["state"]["check"] == "verified", info["state"]
            assert expected in observation["tool_result"]
    finally:
        env.close()
    assert {n: folder_digest(n) for n in originals} == originals
    if backend == "docker":
        assert own_containers() - before == set(), "a container of the env outlived env.close()"


def own_containers() -> set[str]:
    """Ids of the containers this test process made that still exist."""
    import docker

    labels = f"themisto-env.host-pid={os.getpid()}"
    return {c.id for c in docker.from_env().containers.list(all=True, filters={"label": labels}, ignore_removed=True)}


def test_sync_never_follows_a_link_the_kernel_planted(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host file\n")
    source = tmp_path / "source"
    (source / "data").mkdir(parents=True)
    (source / "data" / "x.csv").write_text("a\n1\n")
    store = FileStore(tmp_path / "files")
    tree = scan(source, limit_bytes=LIMIT)
    store.add(source, tree)
    with Kernel("local", snapshot_dir=tmp_path / "snapshots") as kernel:
        kernel.snapshots.set_files(tree, store)
        kernel.execute(
            f"import os, shutil\nshutil.rmtree('data')\nos.symlink({str(tmp_path)!r}, 'data')\n"
            f"os.symlink({str(victim)!r}, 'other.csv')"
        )
        assert "data/x.csv" not in kernel.snapshots.files() and "other.csv" not in kernel.snapshots.files()
        kernel.snapshots.set_files(tree, store)
        assert kernel.snapshots.files() == tree and not (kernel.snapshots.workdir / "data").is_symlink()
        assert not (kernel.snapshots.workdir / "other.csv").exists()
    assert victim.read_text() == "host file\n" and not (tmp_path / "x.csv").exists()


def test_dataset_moved_elsewhere_still_serves_its_files(dataset: Path, tmp_path: Path) -> None:
    import shutil

    moved = Path(shutil.copytree(dataset, tmp_path / "moved"))
    writeback = by_name(moved)["writeback"]
    assert writeback.files_store is not None and writeback.files_store.root == moved / "files"
    owner = TrajectoryKernel(lambda: Kernel("local", snapshot_dir=dataset.parent / "snapshots"))
    try:
        assert owner.serve(writeback, 7).check == "verified"
        assert sorted(owner.kernel.snapshots.files()) == [
            "notes.txt",
            "out/summary.csv",
            "writeback.ipynb",
        ]
    finally:
        owner.close()


@pytest.fixture(autouse=True)
def _no_kernel_left() -> Iterator[None]:
    before = run_dirs()
    yield
    close_shared_templates()  # the process's kernel templates (a cache its envs share) and their spares
    assert run_dirs() <= before


def june_log(path: Path, cells: list[str | None]) -> Path:
    """A JuNE log of one session: each cell executed in turn; None is a kernel restart."""
    rows, action = [], 0
    for i, source in enumerate(cells):
        base = {
            "session_id": "s",
            "kernel_id": "k-files",
            "notebook_name": "files.ipynb",
            "user_id": "u",
            "expert": False,
        }
        if source is None:
            rows.append(
                {
                    **base,
                    "action_id": action,
                    "time": f"2024-01-01 10:{i:02d}:00.000",
                    "event": "kernel_restarting",
                    "cell_index": None,
                    "cell_num": None,
                    "cell_type": None,
                    "cell_source": None,
                    "cell_output": None,
                }
            )
            action += 1
            continue
        cell = {"cell_index": f"{i:032x}", "cell_num": i, "cell_type": "code", "cell_source": source}
        rows.append(
            {
                **base,
                **cell,
                "action_id": action,
                "time": f"2024-01-01 10:{i:02d}:00.000",
                "event": "execute",
                "cell_output": None,
            }
        )
        rows.append(
            {
                **base,
                **cell,
                "action_id": action + 1,
                "time": f"2024-01-01 10:{i:02d}:00.100",
                "event": "finished_execute",
                "cell_output": [],
            }
        )
        action += 2
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_june_log_files_survive_a_recorded_restart_in_pooled_kernels(tmp_path: Path) -> None:
    session_files = tmp_path / "session"
    session_files.mkdir()
    (session_files / "seed.txt").write_text("7\n")
    cells = [
        "seed = int(open('seed.txt').read())",
        "open('state.txt', 'w').write(str(seed * 6))",
        None,  # the person restarted the kernel: variables gone, files kept
        "answer = int(open('state.txt').read())",
        "with open('state.txt', 'a') as f:\n    f.write('!')",
        "total = answer + 1",
        "final = open('state.txt').read()",
    ]
    log = june_log(tmp_path / "files.jsonl", cells)
    dataset = tmp_path / "dataset"
    build_dataset(  # without snapshots every state is reached by replay, from a fresh kernel or forward
        [log], dataset, snapshot_dir=tmp_path / "snapshots", progress=False, workdir=session_files, snapshots=False
    )
    (trajectory,) = read_trajectories(dataset)
    assert [s.status for s in trajectory.steps] == ["ok"] * 6, [s.outputs for s in trajectory.steps]
    assert trajectory.steps[2].restarted_before
    with KernelPool(lambda: Kernel("local", snapshot_dir=tmp_path / "snapshots"), size=1) as pool:
        owner = TrajectoryKernel(lambda: Kernel("local", snapshot_dir=tmp_path / "snapshots"), pool=pool)
        routes: list[str] = []
        try:
            for step in (5, 1, 5, 3):  # forward over the recorded restart takes a new pooled kernel
                report = owner.serve(trajectory, step)
                assert report.check == "verified", (step, report.route, report.differences)
                assert not report.faults, report.faults
                routes.append(report.route)
                state = owner.kernel.snapshots.workdir / "state.txt"
                assert (state.read_text() if state.exists() else None) == {5: "42!", 3: "42", 1: None}[step]
        finally:
            owner.close()
    assert routes[2].startswith("forward"), routes  # across the restart, in a new pooled kernel
    assert sorted(p.name for p in session_files.iterdir()) == ["seed.txt"]


@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.slow), "docker"])
def test_try_cell_runs_in_a_copy_with_the_files_of_the_state(
    dataset: Path, originals: dict[str, str], backend: str
) -> None:
    require_backend(backend)
    env = ThemistoEnv(
        dataset=str(dataset), backend=backend, task="next-cell", snapshot_dir=str(dataset.parent / "snapshots")
    )
    try:
        tid = by_name(dataset)["writeback"].id
        samples = env.episode.episode_samples[tid]
        env.reset(options={"trajectory": tid, "sample": len(samples) - 1})  # before the last step
        code = "import os\nprint(repr(open('notes.txt').read()), sorted(os.listdir('.')))\nos.remove('notes.txt')"
        for _ in range(2):  # what the first try removed is back for the second: each try gets its own copy
            observation, _, _, _, info = env.step(ToolCall(tool="try_cell", args={"code": code}))
            assert "'first run\\n3 sensors\\n' ['notes.txt', 'out', 'writeback.ipynb']" in observation["tool_result"]
        assert env.episode.serve_state().check == "verified"
    finally:
        env.close()
    assert {n: folder_digest(n) for n in originals} == originals


def test_a_folder_source_takes_its_notebooks_and_logs_not_the_notebooks_data_files(tmp_path: Path) -> None:
    import shutil

    from themisto_env.build.session_sources import source_files

    folder = tmp_path / "project"
    shutil.copytree(NOTEBOOKS / "sales", folder)
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "june_small.csv", folder / "session-log.csv")
    found = {p.relative_to(folder).as_posix() for p in source_files([folder])}
    assert found == {"sales.ipynb", "session-log.csv"}, "data/*.csv are the notebook's data, not JuNE logs"
