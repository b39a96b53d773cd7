"""Served states under faults: every sample in its recorded state, every fault on its own row.

Each fault test runs the same samples as a clean run and checks that rows differ only where flagged,
and that the flag is on the affected sample. Kernels, kills and snapshots are real.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import themisto_env.state.kernel as state_module
from tests.conftest import require_backend, wait_for
from tests.env.state_fixtures import RESTART_STEP, fault_session, random_session, write_dataset
from tests.sandbox.test_lifetime import engine_proxy  # noqa: F401  (a fixture)
from themisto_env.data.samples import SampleRule
from themisto_env.data.trajectory import read_trajectories
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.errors import BackendUnavailableError
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.recorded_cells import replay_step
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.state.check import diff_fingerprints, expected_fingerprint
from themisto_env.state.copies import imported_modules

ALL_SAMPLES = SampleRule(max_length_quantile=None).model_dump()


@pytest.fixture(scope="module")
def fault_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("fault-data")
    flag = root / "slow-flag"
    snapshots = root / "snapshots"
    write_dataset(root / "dataset", [fault_session(flag)], snapshots)
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(snapshots), "flag": flag}


def make_env(data: dict[str, Any], **options: Any) -> ThemistoEnv:
    options = {"task": "next-cell", "sample_rule": ALL_SAMPLES, "observation": "tools", **options}
    return ThemistoEnv(dataset=data["dataset"], snapshot_dir=data["snapshot_dir"], **options)


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    """The embedded backend and the isolated one (skipped with the reason where no engine runs)."""
    require_backend(request.param)
    return str(request.param)


#: The ``backend`` fixture's cases with the local one marked ``slow``: a test that takes more than a few
#: seconds on the local backend says so with ``@SLOW_ON_LOCAL`` (its docker case is marked ``docker``).
SLOW_ON_LOCAL = pytest.mark.parametrize(
    "backend", [pytest.param("local", marks=pytest.mark.slow), "docker"], indirect=True
)


@pytest.fixture
def env(fault_data: dict[str, Any], backend: str) -> Iterator[ThemistoEnv]:
    env = make_env(fault_data, backend=backend)
    yield env
    env.close()


KEYS = ("scores", "infrastructure_error", "state_mismatch", "recovered", "scored_state", "prediction_failed")


def run_rows(env: ThemistoEnv, act: Any = None) -> dict[int, dict[str, Any]]:
    """One episode from the first sample, predicting each target's first line; a row per scored step,
    with the live state the sample was served in (read before the agent acts)."""
    rows: dict[int, dict[str, Any]] = {}
    obs, info = env.reset(options={"trajectory": 0, "sample": 0})
    while True:
        sample = env.episode.current_sample
        assert sample is not None
        served = served_state(env)
        if act is not None:
            act(env, sample)
        obs, reward, terminated, _, info = env.step(Prediction(text=sample.target.splitlines()[0]))
        rows[sample.step] = {"reward": reward, "served": served, **{k: info.get(k) for k in KEYS}}
        if terminated:
            return rows


def served_state(env: ThemistoEnv) -> dict[str, Any]:
    """The live state of the current sample as the agent would see it: its fingerprint and a tool's
    answer (read through the env's own tool context, as a tool call would)."""
    from themisto_env.env.tools import run_tool

    try:
        context = env.episode.tool_context()
        return {
            "fingerprint": context.kernel.introspect.fingerprint(),
            "variables": run_tool(ToolCall(tool="list_variables"), context).text,
        }
    except Exception as exc:  # a kernel killed by the test: no state to read
        return {"unreadable": type(exc).__name__}


def flagged(row: dict[str, Any]) -> bool:
    return bool(row["infrastructure_error"] or row["state_mismatch"])


@pytest.fixture(scope="module")
def clean_rows(fault_data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    env = make_env(fault_data)
    try:
        rows = run_rows(env)
    finally:
        env.close()
    assert not any(flagged(r) or r["recovered"] for r in rows.values()), rows
    return rows


def assert_same_except(rows: dict[int, dict[str, Any]], clean: dict[int, dict[str, Any]], flagged_steps: set[int]):
    assert set(rows) == set(clean)
    for step, row in rows.items():
        if step in flagged_steps:
            assert flagged(row), f"step {step} should be flagged: {row}"
        else:
            assert not flagged(row), f"step {step} should not be flagged: {row}"
            assert row["scored_state"]["check"] == "verified", (step, row["scored_state"])
            assert row["served"] == clean[step]["served"], f"step {step} was served in another state"
            assert row["scores"] == clean[step]["scores"], f"step {step} scored differently"


# -- states ---------------------------------------------------------------------------------------------


def test_every_sample_is_served_in_its_recorded_state(env: ThemistoEnv, fault_data: dict[str, Any]) -> None:
    trajectory = read_trajectories(fault_data["dataset"])[0]
    env.reset(options={"trajectory": 0, "sample": 0})
    while True:
        sample = env.episode.current_sample
        assert env.episode.serve_state().check == "verified", env.episode.state_report
        live = env.episode.tool_context().kernel.introspect.fingerprint()
        assert not diff_fingerprints(expected_fingerprint(trajectory, sample.step) or {}, live)
        *_, terminated, _, _ = env.step(Prediction(text=""))
        if terminated:
            break


@SLOW_ON_LOCAL
def test_reset_and_stepping_serve_the_same_state(env: ThemistoEnv) -> None:
    stepped: dict[int, tuple[dict[str, str], str]] = {}
    env.reset(options={"trajectory": 0, "sample": 0})
    while True:
        sample = env.episode.current_sample
        listing = env.step(ToolCall(tool="list_variables"))[0]["tool_result"]
        stepped[sample.step] = (env.episode.tool_context().kernel.introspect.fingerprint(), listing)
        if env.step(Prediction(text=""))[2]:
            break
    for index, step in enumerate(sorted(stepped)):
        obs, info = env.reset(options={"trajectory": 0, "sample": index})
        assert info["state"]["check"] == "not served", "a reset touches no kernel"
        obs, *_, info = env.step(ToolCall(tool="list_variables"))
        assert info["state"]["check"] == "verified", info["state"]
        assert (env.episode.tool_context().kernel.introspect.fingerprint(), obs["tool_result"]) == stepped[step], (
            f"step {step}"
        )


def test_a_sample_after_a_restart_starts_from_an_empty_namespace(env: ThemistoEnv) -> None:
    index = next(i for i, s in enumerate(env.episode.episode_samples["faults-faults"]) if s.step == RESTART_STEP)
    env.reset(options={"trajectory": 0, "sample": index - 1})  # reached by stepping
    env.step(Prediction(text=""))
    assert env.episode.current_sample.step == RESTART_STEP
    assert env.episode.tool_context().kernel.introspect.fingerprint() == {}
    assert "No user variables" in env.step(ToolCall(tool="list_variables"))[0]["tool_result"]
    env.reset(options={"trajectory": 0, "sample": index})  # reached by reset
    assert env.episode.tool_context().kernel.introspect.fingerprint() == {}


def test_names_a_snapshot_cannot_hold_are_rebuilt_and_stepping_on_matches_the_recording(
    env: ThemistoEnv, fault_data: dict[str, Any]
) -> None:
    trajectory = read_trajectories(fault_data["dataset"])[0]
    assert "g" in trajectory.steps[7].snapshot_skipped, "the generator cannot be pickled"
    index = next(i for i, s in enumerate(env.episode.episode_samples["faults-faults"]) if s.step == 7)
    env.reset(options={"trajectory": 0, "sample": index})
    report = env.episode.serve_state()
    assert report.check == "verified" and "keeping g" in report.route, report
    kernel = env.episode.tool_context().kernel
    assert kernel.execute("rows.append(next(g)); rows").outputs[0]["data"]["text/plain"] == "[1, 2, 3, 4]"


# -- faults ---------------------------------------------------------------------------------------------


def _kill(env: ThemistoEnv) -> None:
    launcher = env.episode.tool_context().kernel.launcher
    # a container's kernel is found among its init's children through /proc: under load, not at once
    assert wait_for(lambda: launcher.pid() is not None, 10), "the kernel's process is not visible"
    pid = launcher.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)


def _kill_prediction(env: ThemistoEnv) -> None:
    """Kill the disposable kernel that runs the prediction, once it runs it."""
    for _ in range(400):
        running = env.episode.scorer.disposable_kernels().running
        if running is not None and (pid := running.launcher.pid()) is not None:
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


@SLOW_ON_LOCAL
def test_a_kill_during_an_advance_lands_on_the_next_sample(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    env = make_env(fault_data, backend=backend)
    original, killed, replayed = replay_step, [], []  # the env replays through the name state.py imported

    def kill_before_step_4(kernel: Any, step: Any, **options: Any) -> Any:
        replayed.append(step.index)
        # a container's kernel is found among its init's children through /proc: under load, not at once (an
        # error raised here would be the env's to handle, as a fault: the test says it after the run instead)
        if step.index == 4 and not killed and wait_for(lambda: kernel.launcher.pid() is not None, 30):
            killed.append(kernel.launcher.pid())
            os.kill(killed[0], signal.SIGKILL)  # the kernel dies while the env moves to step 5
        return original(kernel, step, **options)

    monkeypatch.setattr(state_module, "replay_step", kill_before_step_4)
    try:
        rows = run_rows(env)
    finally:
        env.close()
    assert 4 in replayed, f"the advance to step 5 replayed no step 4 (replayed: {replayed})"
    assert killed, "the kernel's process never became visible to the host"
    assert_same_except(rows, clean_rows, flagged_steps=set())  # repaired and verified: scored
    assert rows[5]["recovered"] and "KernelDiedError" in rows[5]["recovered"][0]
    assert not any(rows[s]["recovered"] for s in rows if s != 5), "the fault is reported with step 5 only"
    assert rows[5]["scored_state"]["check"] == "verified"


@SLOW_ON_LOCAL
def test_a_kill_during_a_tool_call_flags_that_sample_only(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]], backend: str
) -> None:
    env = make_env(fault_data, backend=backend)

    def kill_then_call(env: ThemistoEnv, sample: Any) -> None:
        if sample.step == 3:
            _kill(env)
            obs, *_, info = env.step(ToolCall(tool="list_variables"))
            assert "sandbox failed" in obs["tool_result"] and "infrastructure_error" in info

    try:
        rows = run_rows(env, act=kill_then_call)
    finally:
        env.close()
    assert_same_except(rows, clean_rows, flagged_steps={3})


@pytest.mark.slow
def test_a_prediction_that_kills_the_kernel_is_its_own_failure_and_touches_no_other_row(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]]
) -> None:
    """Under the execution score, a kernel that dies while it runs the prediction is the prediction's
    failure (scored 0 with a reason, counted), never an infrastructure failure; later samples are served
    in their recorded state."""
    env = make_env(fault_data, execution_score=True)
    rows: dict[int, dict[str, Any]] = {}
    env.reset(options={"trajectory": 0, "sample": 0})
    try:
        while True:
            sample = env.episode.current_sample
            served = served_state(env)
            text = sample.target.splitlines()[0]
            if sample.step == 5:
                text = "import os\nos._exit(3)"
            elif sample.step == 11:  # killed from outside while it runs: indistinguishable, also its own
                text = "import time\ntime.sleep(20)"
                threading.Thread(target=_kill_prediction, args=(env,)).start()
            *_, terminated, _, info = env.step(Prediction(text=text))
            rows[sample.step] = {"served": served, **{k: info.get(k) for k in (*KEYS, "execution_score")}}
            if terminated:
                break
    finally:
        env.close()
    for step in (5, 11):
        assert rows[step]["prediction_failed"] == "exit" and rows[step]["execution_score"] == 0.0, rows[step]
    assert not any(flagged(r) for r in rows.values()), [s for s, r in rows.items() if flagged(r)]
    assert all(rows[s]["served"] == clean_rows[s]["served"] for s in rows), "a later state was disturbed"
    assert all(rows[s]["scores"] == clean_rows[s]["scores"] for s in rows if s not in (5, 11))


@pytest.mark.slow
def test_a_replayed_cell_that_times_out_flags_the_samples_it_cannot_serve(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]]
) -> None:
    flag: Path = fault_data["flag"]
    flag.touch()  # steps 6 and 10 now sleep: their replays time out
    env = make_env(fault_data, limits={"timeout_s": 1.0, "interrupt_grace_s": 2.0})
    try:
        rows = run_rows(env)
    finally:
        env.close()
        flag.unlink()
    # The generator that step 6 advances lives in no snapshot: 7 and 8 cannot be reached, and say so.
    assert_same_except(rows, clean_rows, flagged_steps={7, 8})
    assert "step 6 ended 'timeout'" in rows[7]["infrastructure_error"]


@pytest.mark.parametrize(
    ("backend_name", "damage"),  # the check runs in the kernel the same way everywhere: one damage on docker
    [
        pytest.param("local", "flip", marks=pytest.mark.slow),
        pytest.param("local", "truncate", marks=pytest.mark.slow),
        pytest.param("local", "garbage", marks=pytest.mark.slow),
        ("docker", "flip"),
    ],
)
def test_damaged_snapshots_are_set_aside_and_the_state_rebuilt(
    tmp_path: Path, fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]], damage: str, backend_name: str
) -> None:
    require_backend(backend_name)
    backend = backend_name
    # A private copy of the store: damage must not leak into other tests.
    import shutil

    store = tmp_path / "snapshots"
    shutil.copytree(fault_data["snapshot_dir"], store)
    data = {**fault_data, "snapshot_dir": str(store)}
    trajectory = read_trajectories(data["dataset"])[0]
    digests = {s.snapshot for s in trajectory.steps if s.snapshot and not s.snapshot_skipped}
    for digest in digests:
        path = store / digest[:2] / f"{digest}.dill"
        raw = bytearray(path.read_bytes())
        if damage == "flip":
            raw[len(raw) // 2] ^= 0x01
        elif damage == "truncate":
            raw = raw[: len(raw) // 2]
        else:
            raw[:16] = b"\x00garbage-header!"
        path.write_bytes(bytes(raw))
    env = make_env(data, backend=backend)
    try:
        samples = list(enumerate(env.episode.episode_samples["faults-faults"]))
        for index, sample in reversed(samples):  # backwards: each reset needs a snapshot, none is forward
            env.reset(options={"trajectory": 0, "sample": index})
            report = env.episode.serve_state()
            assert report.check == "verified", (sample.step, report)
            route = report.route
            assert "snapshot after" not in route or "keeping" in route, route
        rows = run_rows(env)
    finally:
        env.close()
    assert_same_except(rows, clean_rows, flagged_steps=set())
    needed = digests - {trajectory.steps[-1].snapshot}  # no sample starts after the last step
    assert all((store / d[:2] / f"{d}.dill.corrupt").exists() for d in needed), "set aside, not deleted"
    assert not any((store / d[:2] / f"{d}.dill").exists() for d in needed)


@pytest.mark.slow
def test_an_unrepairable_state_is_flagged_as_a_mismatch(tmp_path: Path) -> None:
    """No snapshots and an unseeded random cell: the replayed state cannot equal the recorded one."""
    dataset = write_dataset(tmp_path / "dataset", [random_session()], tmp_path / "snapshots", snapshots=False)
    env = ThemistoEnv(
        dataset=str(dataset), snapshot_dir=str(tmp_path / "snapshots"), task="next-cell", sample_rule=ALL_SAMPLES
    )
    try:
        rows = run_rows(env)
    finally:
        env.close()
    assert not flagged(rows[1]), "before the random value exists the state matches"
    for step in (2, 3, 4, 5):
        assert rows[step]["state_mismatch"] and "seed_free" in rows[step]["state_mismatch"], rows[step]
        assert not rows[step]["infrastructure_error"]


@pytest.mark.slow
def test_full_mode_passes_the_checker_and_is_the_same_in_two_processes(fault_data: dict[str, Any]) -> None:
    import json
    import subprocess
    import sys

    from gymnasium.utils.env_checker import check_env

    for task in ("next-cell", "output"):
        env = make_env(fault_data, observation="full", task=task)
        try:
            check_env(env, skip_render_check=True)
        finally:
            env.close()
    program = (
        "import json, sys\nfrom themisto_env.env.core import ThemistoEnv\n"
        f"env = ThemistoEnv(dataset={fault_data['dataset']!r}, snapshot_dir={fault_data['snapshot_dir']!r},"
        f" observation='full', sample_rule={ALL_SAMPLES!r})\n"
        "obs, _ = env.reset(seed=3)\nprint(json.dumps(obs['runtime']))\nenv.close()\n"
    )
    runs = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True) for _ in "ab"]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first == second and "Kernel memory" in first and "0x7" not in first


@pytest.mark.slow
def test_every_bundled_sample_has_the_same_state_by_reset_as_by_stepping() -> None:
    """The bundled data, every next-cell sample of every trajectory: verified either way, and the same
    fingerprint and tool answers whether reached by stepping through the episode or by a reset."""
    env = ThemistoEnv(task="next-cell", observation="tools", tool_budget=2)
    try:
        for tid in env.episode.episode_ids:
            stepped = []
            env.reset(options={"trajectory": tid, "sample": 0})
            while True:
                obs, *_, info = env.step(ToolCall(tool="list_variables"))
                assert info["state"]["check"] == "verified", (tid, env.episode.current_sample.step, info["state"])
                stepped.append((env.episode.tool_context().kernel.introspect.fingerprint(), obs["tool_result"]))
                obs, _, terminated, _, info = env.step(Prediction(text=""))
                if terminated:
                    break
            for index in reversed(range(len(stepped))):  # backwards: every reset restores
                env.reset(options={"trajectory": tid, "sample": index})
                obs, *_, info = env.step(ToolCall(tool="list_variables"))
                assert info["state"]["check"] == "verified", (tid, index, info["state"])
                assert (env.episode.tool_context().kernel.introspect.fingerprint(), obs["tool_result"]) == stepped[
                    index
                ], (
                    tid,
                    index,
                )
    finally:
        env.close()


@pytest.mark.slow
def test_every_bundled_snapshot_forked_holds_the_recorded_state() -> None:
    """Every snapshot of the bundled data, copied by a fork of its state template (no restore): the copy's
    fingerprint is the one recorded at build time after that step (which a restore gives too: the sweep
    above)."""
    dataset = Dataset.open()
    preload = imported_modules(dataset.trajectories.values())
    with KernelTemplate("local", preload=preload, snapshot_dir=dataset.snapshot_dir) as template:
        checked = 0
        for trajectory in dataset.trajectories.values():
            for step in trajectory.steps:
                if step.snapshot is None or step.fingerprint is None or step.snapshot_skipped:
                    continue
                [copy] = template.copies(step.snapshot, 1)
                with copy:
                    assert copy.introspect.fingerprint() == step.fingerprint, (trajectory.id, step.index)
                checked += 1
        assert checked > 100, checked


def test_a_lost_engine_mid_episode_keeps_the_scored_sample_and_stops_in_one_line(
    fault_data: dict[str, Any], request: pytest.FixtureRequest, docker_engine: None
) -> None:
    proxy = request.getfixturevalue("engine_proxy")  # DOCKER_HOST through a proxy we can cut
    # No warm spare: a container started through the proxy could not be removed once it is cut.
    env = make_env(fault_data, backend="docker", warm_kernels=0)
    try:
        env.reset(options={"trajectory": 0, "sample": 0})
        *_, info = env.step(Prediction(text=""))
        assert "scores" in info
        name = env.episode.tool_context().kernel.launcher.container_name
        proxy.real_client().api.kill(name)  # what an engine restart does to its containers
        proxy.stop()
        *_, info = env.step(Prediction(text="x"))  # scored from the recording: no state was needed
        assert "scores" in info and not info.get("infrastructure_error")
        with pytest.raises(BackendUnavailableError) as lost:  # the next state needs the engine
            env.step(ToolCall(tool="list_variables"))
        message = str(lost.value)
        assert "\n" not in message and "is not reachable" in message, message
    finally:
        env.close()  # does not raise without an engine
        with contextlib.suppress(Exception):
            proxy.real_client().api.remove_container(name, force=True)


def test_model_written_code_on_the_local_backend_is_warned_about_once(
    fault_data: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    import themisto_env.env.config as env_module

    env_module._WARNED_UNISOLATED.discard("local")
    with caplog.at_level("WARNING", logger="themisto_env"):
        for _ in range(2):
            make_env(fault_data, execution_score=True).close()
        make_env(fault_data).close()
    warnings = [r.getMessage() for r in caplog.records if "not isolated" in r.getMessage()]
    assert len(warnings) == 1 and "--backend docker" in warnings[0], warnings
