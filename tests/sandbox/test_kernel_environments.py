"""Kernel environments (``themisto kernel-env``): content ids, a venv with older packages, kernels in it, datasets
built in it and served from it with no option, and snapshots restored only in the environment that wrote
them.

The environment with pandas 1.5.3 and numpy 1.26.4 is made once per machine in the user cache (about 45 s
cold, 25 s with pip's cache warm; instant afterwards): its id is a hash of its requirements, so every run
after the first finds it. Timings are in ``benchmarks/bench_kernel_environments.py``, not here.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from typer.testing import CliRunner

from tests.conftest import needs
from themisto_env.build.builder import use_kernel_environment
from themisto_env.cli import app
from themisto_env.data.trajectory import read_manifest, read_trajectories
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import BackendUnavailableError, ConfigError, SnapshotEnvironmentError
from themisto_env.replay.resolve import dataset_kernel_environment
from themisto_env.sandbox.environments import docker_image, environment_registry, environment_spec, manage, venv
from themisto_env.sandbox.environments.location import environment_dir, environment_image
from themisto_env.sandbox.kernel.core import Kernel

DATA = Path(__file__).parents[1] / "fixtures"
REQUIREMENTS = DATA / "environments" / "requirements.txt"
LEGACY = DATA / "notebooks" / "legacy" / "legacy.ipynb"  # another part of issue 11's test data, if present
NAME = "themisto-test-old-pandas"
#: Cells that run alike under pandas 1.5 and 3 (so a replay in either environment ends as recorded).
CELLS = [
    "import pandas as pd\nimport numpy as np",
    "df = pd.DataFrame({'team': ['a', 'b', 'a', 'c'], 'score': [3, 5, 8, 13]})",
    "totals = df.groupby('team')['score'].sum()\ntotals",
    "top = totals.idxmax()\ntop",
    "arr = np.arange(6).reshape(2, 3)\narr.sum()",
    "print(len(df), top)",
]


@pytest.fixture(scope="module")
@needs("environments")
def old_env() -> environment_spec.KernelEnvironmentRecord:
    """The environment of ``tests/fixtures/environments/requirements.txt`` (made on first use)."""
    record, _ = manage.create(NAME, environment_spec.make_spec(REQUIREMENTS))
    return record


@pytest.fixture
def snapshots(tmp_path: Path) -> Path:
    return tmp_path / "snapshots"


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(cells)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


# -- specs ---------------------------------------------------------------------------------------------


def test_the_id_is_the_content() -> None:
    spec = environment_spec.make_spec("pandas==1.5.3\nnumpy==1.26.4\n")
    same = environment_spec.make_spec("# pinned\n  NumPy == 1.26.4   # old\n\nPandas==1.5.3\n")
    assert same.requirements == spec.requirements == ["numpy==1.26.4", "pandas==1.5.3"]
    assert same.id == spec.id
    assert environment_spec.make_spec("pandas==1.5.2\nnumpy==1.26.4\n").id != spec.id
    assert environment_spec.make_spec("pandas==1.5.3\nnumpy==1.26.4\n", apt=["libgomp1"]).id != spec.id
    assert environment_spec.make_spec("pandas==1.5.3\nnumpy==1.26.4\n", python="3.10").id != spec.id
    assert environment_spec.make_spec(REQUIREMENTS).id == spec.id  # the file's comment does not count


@pytest.mark.parametrize(
    ("text", "apt", "python", "message"),
    [
        ("-r other.txt\n", None, None, r"pip options \(-r\) are not taken"),
        ("pandas==\n", None, None, "line 1: not a requirement"),
        ("", ["Not A Package"], None, "not a Debian package name"),
        ("", None, "three", "as X.Y"),
    ],
)
def test_bad_specs_are_one_line_errors(text: str, apt: list[str] | None, python: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        environment_spec.make_spec(text, apt=apt, python=python)
    assert "\n" not in str(caught.value)


def test_a_python_that_is_not_here_names_those_that_are() -> None:
    spec = environment_spec.make_spec("", python="3.99")
    with pytest.raises(ConfigError, match=r"no Python 3\.99 on this machine \(available: [^)]*3\.11") as caught:
        manage.create("themisto-test-no-such-python", spec)
    assert "\n" not in str(caught.value)
    assert "themisto-test-no-such-python" not in environment_registry.read_registry()


@pytest.mark.slow
def test_requirements_pip_cannot_meet_are_one_line_errors() -> None:
    spec = environment_spec.make_spec("pandas==0.0.1\n")
    with pytest.raises(
        ConfigError, match=r"installing 1 requirement\(s\) .* failed \(exit 1\): .*pandas==0\.0\.1"
    ) as caught:
        manage.create("themisto-test-unmeetable", spec)
    assert "\n" not in str(caught.value) and "; log: " in str(caught.value)
    assert environment_registry.read_record(spec.id) is None and not environment_dir(spec.id).exists()
    assert "themisto-test-unmeetable" not in environment_registry.read_registry()


def test_bad_names_are_refused() -> None:
    for bad in ("default", "0123456789ab", "a b", ""):
        with pytest.raises(ConfigError, match="bad environment name"):
            manage.create(bad, environment_spec.make_spec(""))


def test_debian_packages_already_installed_are_left_alone(tmp_path: Path) -> None:
    """``--apt`` for a venv installs on the host only what is missing (dpkg is always there)."""
    log = tmp_path / "apt.log"
    log.write_text("")
    venv.ensure_apt_on_host(["dpkg"], log, None)
    assert log.read_text() == ""  # no apt-get ran


# -- a venv with older packages --------------------------------------------------------------------------


def test_created_once_then_cached(old_env: environment_spec.KernelEnvironmentRecord) -> None:
    assert old_env.packages["pandas"] == "1.5.3" and old_env.packages["numpy"] == "1.26.4"
    assert {"ipykernel", "dill"} <= old_env.packages.keys()  # resolved by pip beside the pins
    record, cached = manage.create(NAME, environment_spec.make_spec(REQUIREMENTS))
    assert cached and record.id == old_env.id
    assert NAME in environment_registry.names_of(old_env.id)
    assert environment_registry.resolve(NAME).id == old_env.id == environment_registry.resolve(old_env.id).id


def test_a_kernel_in_the_environment_has_its_packages(
    old_env: environment_spec.KernelEnvironmentRecord, snapshots: Path
) -> None:
    with Kernel("local", environment=old_env.id, snapshot_dir=snapshots) as kernel:
        result = kernel.execute("import sys, numpy, pandas\nprint(pandas.__version__, numpy.__version__, sys.prefix)")
        version, numpy_version, prefix = result.outputs[0]["text"].split()
        assert (version, numpy_version) == ("1.5.3", "1.26.4")
        assert Path(prefix) == old_env.folder / "venv"
        # The in-kernel helper works under the old packages: every view the tools use.
        kernel.execute("df = pandas.DataFrame({'a': [1, 2, 3], 'b': ['x', 'y', 'z']})\nimport numpy as np")
        assert {v.name for v in kernel.introspect.list_variables().variables} >= {"df"}
        assert tuple(kernel.introspect.inspect_variable("df").shape or ()) == (3, 2)
        assert "a" in kernel.introspect.dataframe("df", view="describe").text
        assert kernel.introspect.memory().variables_total_bytes > 0
        assert (
            "x" in kernel.introspect.dataframe("df", view="info").text
            or "RangeIndex" in kernel.introspect.dataframe("df", view="info").text
        )
        assert kernel.introspect.package_versions(["pandas"]) == {"pandas": "1.5.3"}
        assert kernel.introspect.fingerprint()["df"].startswith("pandas.core.frame.DataFrame|3x2|")


def test_a_missing_environment_says_how_to_make_it(snapshots: Path) -> None:
    with pytest.raises(
        BackendUnavailableError, match=r"not on this machine: create it with `themisto kernel-env create"
    ):
        Kernel("local", environment="0123456789ab", snapshot_dir=snapshots).start()


# -- snapshots stay in their environment ---------------------------------------------------------------


def test_snapshots_are_restored_only_in_the_environment_that_wrote_them(
    old_env: environment_spec.KernelEnvironmentRecord, snapshots: Path
) -> None:
    with Kernel("local", environment=old_env.id, snapshot_dir=snapshots) as old:
        old.execute("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})")
        written_old = old.snapshots.save().digest
    with Kernel("local", snapshot_dir=snapshots) as default:
        default.execute("x = 41 + 1")
        written_default = default.snapshots.save().digest
        with pytest.raises(SnapshotEnvironmentError, match=f"written in kernel environment {old_env.id}"):
            default.snapshots.restore(written_old)
        assert "df" not in default.introspect.fingerprint()  # nothing was loaded
        assert default.snapshots.restore(written_default).names == ["x"]
    with Kernel("local", environment=old_env.id, snapshot_dir=snapshots) as old:
        with pytest.raises(SnapshotEnvironmentError, match="written in kernel environment default"):
            old.snapshots.restore(written_default)
        assert "df" in old.snapshots.restore(written_old).names


# -- datasets built in an environment -------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(
    old_env: environment_spec.KernelEnvironmentRecord, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A dataset of `CELLS` built with ``themisto data build --kernel-env`` (its snapshots in the user cache)."""
    root = tmp_path_factory.mktemp("env-built")
    notebook = write_notebook(root / "nb" / "teams.ipynb", CELLS)
    result = CliRunner().invoke(app, ["data", "build", str(notebook), "--out", str(root / "ds"), "--kernel-env", NAME])
    assert result.exit_code == 0, result.output
    yield root / "ds"


def test_the_manifest_records_the_environment(built: Path, old_env: environment_spec.KernelEnvironmentRecord) -> None:
    manifest = read_manifest(built)
    assert manifest.environment is not None
    assert (manifest.environment.id, manifest.environment.name) == (old_env.id, NAME)
    assert manifest.environment.requirements == "numpy==1.26.4\npandas==1.5.3\n"
    assert (built / environment_spec.REQUIREMENTS_FILE).read_text() == manifest.environment.requirements
    assert manifest.packages["pandas"] == "1.5.3"  # what the snapshots need: the environment's
    (trajectory,) = read_trajectories(built)
    assert trajectory.environment == old_env.id
    assert all(step.status == "ok" and step.snapshot for step in trajectory.steps)
    assert str(built.resolve()) in environment_registry.datasets_using(old_env.id)


def test_the_env_serves_the_dataset_in_its_environment_with_no_option(
    built: Path, old_env: environment_spec.KernelEnvironmentRecord
) -> None:
    env = ThemistoEnv(dataset=str(built), task="next-cell", warm_kernels=0)
    try:
        assert env.episode.spec.environment == old_env.id
        env.reset(seed=0, options={"trajectory": 0, "sample": 0})
        report = env.episode.serve_state()
        assert report.check == "verified" and report.route.startswith("snapshot")
        assert not report.refused_snapshots
        assert env.episode.tool_context().kernel.execute("pd.__version__").outputs[0]["data"]["text/plain"] == "'1.5.3'"
    finally:
        env.close()


def test_a_kernel_of_another_environment_replays_instead_of_restoring(built: Path) -> None:
    env = ThemistoEnv(dataset=str(built), task="next-cell", warm_kernels=0, environment="default")
    try:
        assert env.episode.spec.environment is None
        env.reset(seed=0, options={"trajectory": 0, "sample": 0})
        report = env.episode.serve_state()
        assert report.refused_snapshots
        # The latest snapshot is refused and its step replayed; the replay may start from an earlier snapshot
        # that a kernel of this kernel environment wrote too (the same bytes: a namespace of modules only,
        # which pickle by name), as another dataset in the shared cache may have done.
        assert not report.route.startswith(f"snapshot after step {report.step - 1}"), report.route
        restored = report.route.removeprefix("snapshot after step ").split(" ")[0]
        if report.route.startswith("snapshot"):
            (trajectory,) = read_trajectories(built)
            digest = trajectory.steps[int(restored)].snapshot
            assert digest not in report.refused_snapshots
            assert "default" in env.episode.tool_context().kernel.store.environments(digest)
        # The replay ran in today's pandas: its modules are not the recorded ones (the check says so).
        assert env.episode.tool_context().kernel.execute("pd.__version__").outputs[0]["data"]["text/plain"] != "'1.5.3'"
        assert "written in another kernel environment" in report.as_dict()["snapshots_refused"]  # info["state"]
    finally:
        env.close()


def test_a_dataset_whose_environment_is_missing_says_how_to_make_it(built: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(built, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["environment"]["id"] = "0123456789ab"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BackendUnavailableError) as caught:
        ThemistoEnv(dataset=str(copy), task="next-cell")
    message = str(caught.value)
    assert "\n" not in message and "0123456789ab" in message
    requirements = copy / environment_spec.REQUIREMENTS_FILE
    assert f"`themisto kernel-env create {NAME} --requirements {requirements} --python 3.11`" in message


@pytest.mark.skipif(not LEGACY.exists(), reason="tests/fixtures/notebooks/legacy is not there")
def test_the_legacy_notebook_agrees_in_its_environment(tmp_path: Path, pinned_environments: None) -> None:
    """The notebook that needs pandas 1.5 (``DataFrame.append``, ``Series.iteritems``, ``mad``): built with
    ``--requirements`` beside it, every cell runs and its replayed output agrees with the saved one."""
    result = CliRunner().invoke(
        app,
        [
            "data",
            "build",
            str(LEGACY),
            "--out",
            str(tmp_path / "ds"),
            "--requirements",
            str(LEGACY.parent / "requirements.txt"),
        ],
    )
    assert result.exit_code == 0, result.output
    (trajectory,) = read_trajectories(tmp_path / "ds")
    assert [s.status for s in trajectory.steps] == ["ok"] * len(trajectory.steps)
    assert all(s.agrees for s in trajectory.steps)
    environment = read_manifest(tmp_path / "ds").environment
    assert environment is not None
    assert environment.id == environment_spec.make_spec(LEGACY.parent / "requirements.txt").id


# -- the command line ------------------------------------------------------------------------------------


def test_kernel_env_create_list_and_rm(old_env: environment_spec.KernelEnvironmentRecord) -> None:
    runner = CliRunner()
    alias = "themisto-test-alias"
    result = runner.invoke(app, ["kernel-env", "create", alias, "--requirements", str(REQUIREMENTS)])
    assert result.exit_code == 0, result.output
    assert f"{old_env.id} (exists)" in result.output
    listed = {row["id"]: row for row in json.loads(runner.invoke(app, ["kernel-env", "list", "--json"]).output)}
    assert alias in listed[old_env.id]["names"] and listed[old_env.id]["packages"] == len(old_env.packages)
    table = runner.invoke(app, ["kernel-env", "list"]).output
    assert "packages" in table and "1.5" not in table  # a table of environments, not of packages
    result = runner.invoke(app, ["kernel-env", "rm", alias])
    assert result.exit_code == 0 and NAME in result.output.split("kept for")[1]  # the environment stays
    assert environment_registry.read_record(old_env.id) is not None


def recorded(spec: environment_spec.KernelEnvironmentSpec) -> environment_spec.KernelEnvironmentRecord:
    """An environment's record with a stand-in venv (nothing is installed): for the registry's logic."""
    record = environment_spec.KernelEnvironmentRecord(id=spec.id, spec=spec)
    record.python.parent.mkdir(parents=True)
    record.python.write_text("")
    environment_registry.write_record(record)
    return record


def test_a_changed_requirements_file_moves_the_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a cache of its own: the name follows the new requirements; a dataset keeps its id."""
    monkeypatch.setenv("THEMISTO_CACHE", str(tmp_path / "cache"))
    old, new = (
        recorded(environment_spec.make_spec("six==1.16.0\n")),
        recorded(environment_spec.make_spec("six==1.17.0\n")),
    )
    assert manage.create("mine", old.spec) == (old, True)  # exists: nothing is built
    assert environment_registry.resolve("mine").id == old.id
    assert manage.create("mine", new.spec)[0].id == new.id
    assert environment_registry.resolve("mine").id == new.id and environment_registry.names_of(old.id) == []
    dataset = tmp_path / "ds"
    dataset.mkdir()
    from themisto_env.data.trajectory import Manifest, write_manifest

    manifest = Manifest(backend="local", snapshots=True, sources=[])
    assert use_kernel_environment(old.id, backend="local", manifest=manifest, out=dataset) == old.id
    write_manifest(dataset, manifest)
    assert dataset_kernel_environment(dataset) == old.id  # by id, wherever the name went
    assert dataset_kernel_environment(dataset, "mine") == new.id
    assert dataset_kernel_environment(dataset, "default") is None


def test_env_rm_refuses_while_a_dataset_uses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a cache of its own: a recorded environment (no venv is built) used by one dataset."""
    monkeypatch.setenv("THEMISTO_CACHE", str(tmp_path / "cache"))
    spec = environment_spec.make_spec("six==1.16.0\n")
    record = recorded(spec)
    environment_registry.write_registry({"only": spec.id})
    dataset = tmp_path / "ds"
    dataset.mkdir()
    from themisto_env.data.trajectory import EnvironmentRef, Manifest, write_manifest

    ref = EnvironmentRef(id=spec.id, name="only", python=spec.python, requirements=spec.requirements_txt())
    write_manifest(dataset, Manifest(backend="local", snapshots=True, sources=[], environment=ref))
    environment_registry.note_dataset(spec.id, dataset)
    with pytest.raises(ConfigError, match=r"is used by 1 dataset\(s\), e\.g\. .*ds; `themisto kernel-env rm --force`"):
        manage.remove("only")
    assert environment_registry.read_record(spec.id) is not None and environment_registry.names_of(spec.id) == ["only"]
    manage.remove("only", force=True)
    assert environment_registry.read_record(spec.id) is None and not record.folder.exists()


# -- docker ----------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_a_docker_kernel_runs_the_environments_image(
    old_env: environment_spec.KernelEnvironmentRecord, snapshots: Path, docker_engine: None
) -> None:
    """The image is built from the venv's exact versions on first use (about a minute; then cached)."""
    record = docker_image.ready(environment_registry.resolve(NAME), "docker")
    assert record.image == environment_image(old_env.id)
    with Kernel("docker", environment=old_env.id, snapshot_dir=snapshots) as kernel:
        result = kernel.execute("import pandas, numpy\nprint(pandas.__version__, numpy.__version__)")
        assert result.outputs[0]["text"].split() == ["1.5.3", "1.26.4"]
        kernel.execute("df = pandas.DataFrame({'a': [1, 2]})")
        digest = kernel.snapshots.save().digest
    with Kernel("local", environment=old_env.id, snapshot_dir=snapshots) as local:  # same environment, same versions
        assert local.snapshots.restore(digest).names == ["df", "numpy", "pandas"]
