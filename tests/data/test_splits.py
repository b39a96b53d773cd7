"""Train/test splits: deterministic, hash-based, leak-free by trajectory, kept beside the dataset, and
honoured by every entry point (the env, the runner, the inspect task, the TRL export, rewards and tool env,
the OpenEnv session, the CLI): a sample of the other side is refused with one line, never served."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import nbformat
import pytest
from typer.testing import CliRunner

from themisto_env.cli import app
from themisto_env.data.bundled import bundled_log_path
from themisto_env.data.splits import DEFAULT_RULE, SPLITS, SplitRule, assign
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import ConfigError, SplitError
from themisto_env.replay.dataset import Dataset

#: Six small notebooks (pure Python: quick to replay); "print(total)" is in every one of them, so the
#: verbatim-target count of any split is above 0.
NOTEBOOKS = {
    f"{name}.ipynb": [
        f"base = {i}",
        f"items = [base + k for k in range({i + 3})]",
        "total = sum(items)",
        "print(total)",
        f"label = '{name}-' + str(total)",
        "label.upper()",
    ]
    for i, name in enumerate(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"])
}
#: A rule that leaves both sides of the six trajectories non-empty (checked by the fixture).
RULE = SplitRule(by="trajectory", test_size=0.5, seed=0)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A dataset of the six notebooks built by the real builder, with its snapshot store."""
    from themisto_env.build.builder import build_dataset

    root = tmp_path_factory.mktemp("split-dataset")
    paths = []
    for name, cells in NOTEBOOKS.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1) for i, src in enumerate(cells)]
        (root / name.removesuffix(".ipynb")).mkdir()
        path = root / name.removesuffix(".ipynb") / name
        nbformat.write(nb, path)
        paths.append(path)
    report = build_dataset(paths, root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert len(report.built) == 6 and not report.failed, report
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


@pytest.fixture
def dataset_copy(built: dict[str, str], tmp_path: Path) -> Path:
    """A copy of the built dataset that a test may write a split into."""
    return Path(shutil.copytree(built["dataset"], tmp_path / "dataset"))


def _sides(dataset: Dataset, rule: SplitRule) -> tuple[Dataset, Dataset]:
    return dataset.split(test_size=rule.test_size, by=rule.by, seed=rule.seed)


def _trajectory(tid: str, user: str | None = None, notebook: str | None = None) -> Trajectory:
    return Trajectory(id=tid, session_key=tid, user_id=user, notebook_name=notebook, source_digest="x", backend="local")


# -- the assignment ---------------------------------------------------------------------------------------


def test_the_assignment_is_deterministic_and_keeps_sides_when_the_data_grows() -> None:
    first = [_trajectory(f"t{i}") for i in range(400)]
    grown = first + [_trajectory(f"u{i}") for i in range(400)]
    rule = SplitRule(test_size=0.2, seed=3)
    before, after = assign(first, rule), assign(grown, rule)
    assert all(after[tid] == side for tid, side in before.items()), "a trajectory changed side when data grew"
    assert assign(first, SplitRule(test_size=0.2, seed=3)) == before, "the same rule, the same sides"
    share = sum(side == "test" for side in after.values()) / len(after)
    assert 0.15 < share < 0.25, share
    assert assign(first, SplitRule(test_size=0.2, seed=4)) != before, "another seed, another split"


def test_a_group_stays_on_one_side() -> None:
    trajectories = [_trajectory(f"t{i}", user=f"user{i % 7}", notebook=f"nb{i % 5}.ipynb") for i in range(70)]
    for by, key in (("user", "user_id"), ("notebook", "notebook_name")):
        sides = assign(trajectories, SplitRule(by=by, test_size=0.3))  # type: ignore[arg-type]
        per_group: dict[str, set[str]] = {}
        for t in trajectories:
            per_group.setdefault(getattr(t, key), set()).add(sides[t.id])
        assert all(len(s) == 1 for s in per_group.values()), by


def test_an_empty_side_is_refused_with_seeds_that_fill_both() -> None:
    trajectories = [_trajectory(f"t{i}") for i in range(3)]
    empty = next(
        seed
        for seed in range(100)
        if len(set(assign(trajectories, SplitRule(seed=seed), require_both=False).values())) == 1
    )
    with pytest.raises(ConfigError, match=r"side is empty .*seeds \d+") as caught:
        assign(trajectories, SplitRule(seed=empty))
    assert "\n" not in str(caught.value)


def test_the_default_split_of_the_bundled_data_has_both_sides() -> None:
    """What a user of the bundled data gets with no options: both sides non-empty by every grouping."""
    from themisto_env.build.session_replay import trajectory_id
    from themisto_env.data.june import read_sessions

    sessions = read_sessions(bundled_log_path())
    trajectories = [_trajectory(trajectory_id(s), s.user_id, s.notebook_name) for s in sessions]
    tests = {}
    for by in ("trajectory", "user", "notebook"):
        sides = assign(trajectories, DEFAULT_RULE.model_copy(update={"by": by}))
        tests[by] = sum(side == "test" for side in sides.values())
    assert tests == {"trajectory": 1, "user": 1, "notebook": 1}  # of 6, as README and DEFAULT_RULE say


# -- the dataset's views ----------------------------------------------------------------------------------


def test_views_partition_the_samples_by_trajectory_and_refuse_the_other_side(built: dict[str, str]) -> None:
    dataset = Dataset.open(built["dataset"])
    train, test = _sides(dataset, RULE)
    assert train.trajectories and test.trajectories
    assert not set(train.trajectories) & set(test.trajectories)
    for task in ("next-cell", "output"):
        whole = dataset.samples(task)
        assert sorted(s.id for s in train.samples(task) + test.samples(task)) == sorted(s.id for s in whole)
        assert {s.trajectory_id for s in train.samples(task)} <= set(train.trajectories)
        assert set(test.episodes(task)) <= set(test.trajectories)
    other = test.samples("next-cell")[0]
    assert train.sample(train.samples("next-cell")[0].id)
    with pytest.raises(SplitError, match="is on the test side") as caught:
        train.sample(other.id)
    assert "\n" not in str(caught.value)
    report = dataset.leakage(RULE)
    assert report.trajectories_on_both_sides == 0 and report.groups_on_both_sides == 0
    assert report.verbatim_test_targets["next-cell"] >= 1, "print(total) is in every notebook"
    assert pickle.loads(pickle.dumps(test)).samples("output") == test.samples("output")


def test_a_named_split_is_kept_beside_the_dataset_and_opened_by_name(dataset_copy: Path) -> None:
    dataset = Dataset.open(dataset_copy)
    record = dataset.save_split(RULE, "half")
    assert (dataset_copy / SPLITS).exists() and record.leakage.trajectories_on_both_sides == 0
    assert sum(record.trajectories.values()) == 6 and min(record.trajectories.values()) >= 1
    test = Dataset.open(dataset_copy, split="half:test")
    assert test.split_label == "half:test" and set(test.trajectories) == set(_sides(dataset, RULE)[1].trajectories)
    default = Dataset.open(dataset_copy, split="test")  # no default written: the default rule
    assert set(default.trajectories) == {
        tid for tid, side in assign(dataset.trajectories.values(), DEFAULT_RULE).items() if side == "test"
    }
    with pytest.raises(ConfigError, match="no split named 'other'"):
        Dataset.open(dataset_copy, split="other:test")
    with pytest.raises(ConfigError, match="give train or test"):
        Dataset.open(dataset_copy, split="validation")


def test_data_split_writes_it_and_data_info_shows_it(dataset_copy: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["data", "split", str(dataset_copy), "--test", "0.5", "--by", "trajectory"])
    assert done.exit_code == 0, done.output
    assert "trajectories on both sides 0" in done.output and "verbatim in train" in done.output
    written = json.loads((dataset_copy / SPLITS).read_text())["splits"]["default"]
    assert written["rule"] == {"by": "trajectory", "test_size": 0.5, "seed": 0}
    info = runner.invoke(app, ["data", "info", str(dataset_copy), "--json"])
    assert info.exit_code == 0, info.output
    split = json.loads(info.output)["splits"]["default"]
    assert split["written"] and split["trajectories"] == written["trajectories"]
    assert split["leakage"]["trajectories_on_both_sides"] == 0
    table = runner.invoke(app, ["data", "info", str(dataset_copy)])
    assert "split default: by trajectory, test 0.5, seed 0" in table.output
    bad = runner.invoke(app, ["data", "split", str(dataset_copy), "--by", "week"])
    assert isinstance(bad.exception, ConfigError) and "--by week" in str(bad.exception)  # main(): one line


# -- the entry points -------------------------------------------------------------------------------------


@pytest.fixture
def halves(dataset_copy: Path) -> dict[str, object]:
    """The copy with RULE written as the default split, and the sample ids of each side (next-cell)."""
    dataset = Dataset.open(dataset_copy)
    dataset.save_split(RULE)
    return {
        "dataset": str(dataset_copy),
        "train": [s.id for s in dataset.view("train").samples("next-cell")],
        "test": [s.id for s in dataset.view("test").samples("next-cell")],
    }


def test_the_env_serves_only_its_side(halves: dict, built: dict[str, str]) -> None:
    env = ThemistoEnv(dataset=halves["dataset"], split="train", snapshot_dir=built["snapshot_dir"], warm_kernels=0)
    try:
        assert {s.id for s in env.episode.samples} == set(halves["train"])
        assert env.episode.config.split == "train"
        for seed in range(4):
            env.reset(seed=seed)
            assert env.episode.current_sample.id in halves["train"]
        with pytest.raises(SplitError, match="on the test side"):
            env.reset(options={"sample": halves["test"][0]})
        with pytest.raises(SplitError):
            env.reset(options={"trajectory": halves["test"][0].rsplit("/", 2)[0]})
        env.reset(options={"sample": halves["train"][0]})
        *_, info = env.step(Prediction(text="print(total)"))
        assert info["scored_sample_id"] == halves["train"][0]
    finally:
        env.close()
    view = Dataset.open(halves["dataset"]).view("test")
    with pytest.raises(ConfigError, match="asks for another"):
        ThemistoEnv(dataset=view, split="train")


def test_themisto_run_split_test_runs_only_test_samples(halves: dict, built: dict[str, str], tmp_path: Path) -> None:
    from themisto_env.run.config import load_run_config
    from themisto_env.run.runner import run

    config = load_run_config(
        None, {"data": halves["dataset"], "split": "test", "env": {"snapshot_dir": built["snapshot_dir"]}}
    )
    summary = run(config, tmp_path / "run", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in rows) == sorted(halves["test"]) and summary
    again = load_run_config(None, {"data": halves["dataset"], "split": "train"})
    with pytest.raises(ConfigError):  # a run folder of the test side does not resume as train
        run(again, tmp_path / "run", progress=False)


def test_the_trl_export_and_rewards_honour_the_split(halves: dict, built: dict[str, str]) -> None:
    pytest.importorskip("datasets")
    from themisto_env.bridges.rl.export import export_dataset
    from themisto_env.bridges.rl.rewards import ExecutionReward, MetricReward
    from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv

    rows = export_dataset("next-cell", dataset=halves["dataset"], split="train")
    assert sorted(rows["sample_id"]) == sorted(halves["train"])
    reward = MetricReward(split="train", dataset=halves["dataset"])
    assert reward(completions=["x"], target=["x"], task=["next-cell"], sample_id=[halves["train"][0]]) == [1.0]
    with pytest.raises(SplitError, match="on the test side"):
        reward(completions=["x"], target=["x"], task=["next-cell"], sample_id=[halves["test"][0]])
    with pytest.raises(ConfigError, match="sample_id"):
        reward(completions=["x"], target=["x"], task=["next-cell"])
    with ExecutionReward(dataset=halves["dataset"], split="train", snapshot_dir=built["snapshot_dir"]) as execution:
        assert execution(completions=["print(total)"], sample_id=[halves["train"][0]])[0] is not None
        with pytest.raises(SplitError):
            execution(completions=["print(total)"], sample_id=[halves["test"][0]])
    with SharedStates(
        task="next-cell", dataset=halves["dataset"], split="train", snapshot_dir=built["snapshot_dir"]
    ) as states:
        assert set(states.samples) == set(halves["train"])
        with pytest.raises(SplitError):
            ThemistoToolEnv(states).reset(sample_id=halves["test"][0])


def test_the_inspect_task_takes_a_split(halves: dict) -> None:
    pytest.importorskip("inspect_ai")
    from themisto_env.bridges.inspect_task import themisto

    task = themisto(data=halves["dataset"], split="test", observation="static")
    assert sorted(sample.id for sample in task.dataset) == sorted(halves["test"])
    assert task.sandbox.config.split == "test"  # the sandbox's envs serve the same side


def test_an_openenv_session_refuses_the_other_side(halves: dict, built: dict[str, str]) -> None:
    pytest.importorskip("openenv")
    from themisto_env.bridges.openenv.environment import ThemistoServedEnv

    served = ThemistoServedEnv(
        {"dataset": halves["dataset"], "split": "train", "snapshot_dir": built["snapshot_dir"], "warm_kernels": 0}
    )
    try:
        obs = served.reset(sample_id=halves["train"][0])
        assert obs.info["sample_id"] == halves["train"][0]
        with pytest.raises(SplitError, match="on the test side"):
            served.reset(sample_id=halves["test"][0])
    finally:
        served.close()


VF_TASKS = """
import json, sys
from themisto_env.bridges.vf_taskset import ThemistoTaskset, ThemistoTasksetConfig
from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv
from themisto_env.errors import SplitError

options = {"dataset": sys.argv[1], "split": "train", "snapshot_dir": sys.argv[2]}
tasks = [task.data.sample_id for task in ThemistoTaskset(ThemistoTasksetConfig(options=options)).load()]
with SharedStates(task="next-cell", **options) as states:  # what its tool server serves
    try:
        ThemistoToolEnv(states).reset(sample_id=sys.argv[3])
        refused = ""
    except SplitError as exc:
        refused = str(exc)
print(json.dumps({"tasks": tasks, "refused": refused}))
"""


@pytest.mark.slow  # a verifiers import in a child process: about 28 s under load
def test_the_verifiers_taskset_takes_a_split(halves: dict, built: dict[str, str], tmp_path: Path) -> None:
    """The taskset lists only the split's side and its tool server refuses the other side (run outside the
    repository, as tests/bridges/test_vf_env.py explains)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("verifiers") is None:
        pytest.skip("verifiers is not installed")
    done = subprocess.run(
        [sys.executable, "-c", VF_TASKS, halves["dataset"], built["snapshot_dir"], halves["test"][0]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(result["tasks"]) == sorted(halves["train"])
    assert "on the test side" in result["refused"]
