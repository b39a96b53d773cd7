"""Kernels in Ray actors (the env option ``ray``): the same states, answers and scores as kernels on this
machine; a lost actor is an infrastructure fault of that sample only; snapshots travel to a node that lacks
them; no actor or kernel outlives its owner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import needs, wait_for
from tests.env.test_served_states import ALL_SAMPLES, assert_same_except, make_env, run_rows, served_state
from tests.env.test_served_states import clean_rows as clean_rows
from tests.env.test_served_states import fault_data as fault_data
from themisto_env.env.tools import ToolCall
from themisto_env.errors import HelperError, KernelDiedError, KernelStartError, UnknownNameError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.spec import RayPlacement
from themisto_env.sandbox.ray.kernel import RemoteKernel
from themisto_env.sandbox.store.workdir import FileStore, scan

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'themisto-env[ray]'")


@pytest.fixture(scope="module")
@needs("ray")
def ray_address() -> Iterator[str]:
    """A Ray instance on this machine for the module (logical CPUs beyond the cores: kernels mostly wait)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def live_kernel_hosts() -> list[dict[str, Any]]:
    """The KernelHost actors Ray holds alive (any job)."""
    from ray._private import state

    return [a for a in state.actors().values() if a["ActorClassName"] == "KernelHost" and a["State"] != "DEAD"]


# -- the kernel -------------------------------------------------------------------------------------------


def test_a_remote_kernel_answers_and_fails_as_a_local_one(ray_address: str, tmp_path: Path) -> None:
    code = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nprint(df.a.sum())"
    answers = []
    for kernel in (Kernel("local"), RemoteKernel("local", placement=RayPlacement(address=ray_address))):
        with kernel:
            result = kernel.execute(code)
            failures = []
            for call in (
                lambda k: k.introspect.inspect_variable("missing"),
                lambda k: k.introspect.dataframe("missing"),
            ):
                with pytest.raises(HelperError) as raised:
                    call(kernel)
                failures.append((type(raised.value), str(raised.value)))
            answers.append(
                (
                    result.status,
                    result.outputs,
                    kernel.introspect.list_variables(),
                    kernel.introspect.dataframe("df").text,
                    kernel.introspect.fingerprint(),
                    failures,
                    kernel.execute("1/0").status,
                )
            )
    assert answers[0] == answers[1]
    assert answers[1][5][0][0] is UnknownNameError


def test_a_remote_kernel_computes_with_its_owners_thread_count(ray_address: str) -> None:
    """Ray sets OMP_NUM_THREADS=1 in its actors; a kernel there takes its owner's value (results that depend
    on the thread count, as scikit-learn's tie-breaking does, then match the owner's)."""
    code = "import os; print(os.environ.get('OMP_NUM_THREADS'))"
    seen = []
    for kernel in (Kernel("local"), RemoteKernel("local", placement=RayPlacement(address=ray_address))):
        with kernel:
            seen.append(kernel.execute(code).outputs[0]["text"])
    assert seen[0] == seen[1], seen


def test_working_folder_files_are_sent_to_the_kernels_node(ray_address: str, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "data.csv").write_text("a,b\n1,2\n")
    store = FileStore(tmp_path / "owner-files")
    tree = scan(folder, limit_bytes=2**20)
    store.add(folder, tree)
    placement = RayPlacement(address=ray_address)
    with RemoteKernel("local", placement=placement) as kernel:
        kernel.snapshots.set_files(tree, store)
        result = kernel.execute("print(open('data.csv').read().split()[1])")
        assert result.outputs[0]["text"] == "1,2\n"
        assert kernel.snapshots.files() == tree


def test_a_snapshot_written_remotely_reaches_the_owners_store_and_travels_to_another_node_store(
    ray_address: str, tmp_path: Path
) -> None:
    owner = tmp_path / "owner-store"
    first = RayPlacement(address=ray_address, snapshot_dir=str(tmp_path / "node-a"))
    second = RayPlacement(address=ray_address, snapshot_dir=str(tmp_path / "node-b"))
    with RemoteKernel("local", placement=first, snapshot_dir=owner) as kernel:
        kernel.execute("x = [1, 2, 3]")
        info = kernel.snapshots.save()
    assert (owner / info.digest[:2] / f"{info.digest}.dill").exists()
    with RemoteKernel("local", placement=second, snapshot_dir=owner) as kernel:
        assert kernel.snapshots.restore(info.digest).names == ["x"]
        assert kernel.introspect.inspect_variable("x").repr == "[1, 2, 3]"
    assert (tmp_path / "node-b" / info.digest[:2] / f"{info.digest}.dill").exists()


def test_a_placement_no_node_offers_ends_in_one_line_and_leaves_no_actor(ray_address: str) -> None:
    placement = RayPlacement(address=ray_address, resources={"kernels-node": 1}, start_timeout_s=3)
    before = len(live_kernel_hosts())
    with pytest.raises(KernelStartError) as raised:
        RemoteKernel("local", placement=placement).start()
    assert "kernels-node=1" in str(raised.value) and "\n" not in str(raised.value)
    assert wait_for(lambda: len(live_kernel_hosts()) <= before)


def test_a_lost_actor_is_a_kernel_death(ray_address: str) -> None:
    kernel = RemoteKernel("local", placement=RayPlacement(address=ray_address)).start()
    try:
        ray.kill(kernel._actor)
        with pytest.raises(KernelDiedError, match="was lost"):
            kernel.execute("1 + 1")
        assert not kernel.is_alive()
    finally:
        kernel.close()


# -- the env ----------------------------------------------------------------------------------------------


def test_an_episode_on_ray_kernels_is_served_and_scored_as_on_this_machine(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]], ray_address: str
) -> None:
    env = make_env(fault_data, ray=ray_address)
    try:
        rows = run_rows(env)
        assert type(env.episode.tool_context().kernel).__name__ == "RemoteKernel"
    finally:
        env.close()
    assert_same_except(rows, clean_rows, flagged_steps=set())
    assert wait_for(lambda: not live_kernel_hosts()), "a kernel actor outlived its env"


def test_snapshots_travel_to_nodes_that_lack_them(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]], ray_address: str, tmp_path: Path
) -> None:
    """Each sample served on its own (a reset straight to it) restores a snapshot the kernels' store did not
    have: it is sent, and the state is the one a kernel on this machine is served."""
    node_store = tmp_path / "node-store"
    env = make_env(fault_data, ray={"address": ray_address, "snapshot_dir": str(node_store)}, lazy_state=False)
    routes = {}
    try:
        for index, step in enumerate(sorted(clean_rows)):
            _, info = env.reset(options={"trajectory": 0, "sample": index})
            assert env.episode.current_sample is not None and env.episode.current_sample.step == step
            assert env.episode.state_report is not None
            routes[step] = env.episode.state_report.route
            assert info["state"]["check"] == "verified", (step, info["state"])
            assert served_state(env) == clean_rows[step]["served"], f"step {step} was served in another state"
    finally:
        env.close()
    assert any("snapshot" in route for route in routes.values()), routes
    assert list(node_store.glob("*/*.dill")), "no snapshot was sent to the kernels' store"


def test_a_lost_actor_mid_episode_flags_that_sample_only(
    fault_data: dict[str, Any], clean_rows: dict[int, dict[str, Any]], ray_address: str
) -> None:
    env = make_env(fault_data, ray=ray_address)

    def lose_actor_then_call(env: Any, sample: Any) -> None:
        if sample.step == 3:
            ray.kill(env.episode.tool_context().kernel._actor)
            obs, *_, info = env.step(ToolCall(tool="list_variables"))
            assert "sandbox failed" in obs["tool_result"] and "infrastructure_error" in info

    try:
        rows = run_rows(env, act=lose_actor_then_call)
    finally:
        env.close()
    assert_same_except(rows, clean_rows, flagged_steps={3})


def test_killing_the_owner_takes_its_actors_and_kernels(fault_data: dict[str, Any], ray_address: str) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from themisto_env.env.core import ThemistoEnv
        env = ThemistoEnv(dataset={fault_data["dataset"]!r}, snapshot_dir={fault_data["snapshot_dir"]!r},
                          observation="tools", ray={ray_address!r})
        env.reset(options={{"trajectory": 0, "sample": 1}})
        kernel = env.episode.tool_context().kernel
        print(kernel.node, flush=True)
        print(kernel._invoke("launcher.pid"), flush=True)
        print(kernel.run_dir, flush=True)
        time.sleep(600)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        node = owner.stdout.readline().strip() if owner.stdout else ""
        pid = int(owner.stdout.readline()) if owner.stdout else 0
        run_dir = Path(owner.stdout.readline().strip()) if owner.stdout else Path()
        assert node and pid > 0
        assert wait_for(lambda: any(a["Pid"] == int(node.rsplit(":", 1)[1]) for a in live_kernel_hosts()), 10)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert wait_for(lambda: not live_kernel_hosts(), 60), "the dead owner's kernel actors are still alive"
    assert wait_for(lambda: not _running(pid), 60), f"the dead owner's kernel process {pid} is still running"
    # Ray ends the actor's process tree (the kernel's reaper too): the next kernel started on the node
    # removes what the dead one left, as any first kernel start of a process does.
    with RemoteKernel("local", placement=RayPlacement(address=ray_address)) as kernel:
        kernel.execute("1")
    assert not run_dir.exists(), f"the dead owner's kernel left {run_dir}"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(")")[-1].split()[0] != "Z"


def test_the_trl_execution_reward_and_the_vector_envs_put_their_kernels_on_ray(
    fault_data: dict[str, Any], ray_address: str
) -> None:
    from themisto_env.bridges.rl.rewards import ExecutionReward
    from themisto_env.bridges.rl.vector import batch_actions, make_vector_env
    from themisto_env.env.actions import Prediction

    options = {"dataset": fault_data["dataset"], "snapshot_dir": fault_data["snapshot_dir"]}
    options["sample_rule"] = ALL_SAMPLES
    values = []
    for ray_option in (None, ray_address):
        with ExecutionReward(parse=False, ray=ray_option, **options) as reward:
            samples = reward.dataset.samples(reward.config.task, reward.config.sample_rule)[:3]
            ids, targets = [s.id for s in samples], [s.target for s in samples]
            values.append(reward(completions=[*targets, "x = 1"], sample_id=[*ids, ids[0]]))
            if ray_option is not None:  # the completions ran in kernels of this kind
                kernel = reward.scorer.disposable_kernels().pool.take()
                kernel.close()
                assert type(kernel).__name__ == "RemoteKernel"
    assert values[0] == values[1] and all(v is not None for v in values[1])

    vector = make_vector_env(2, task="next-cell", observation="tools", ray=ray_address, **options)
    try:
        vector.reset(seed=0)
        observations, *_ = vector.step(batch_actions([ToolCall(tool="list_variables")] * 2))
        assert all("sandbox failed" not in text for text in observations["tool_result"])
        kernels = [env.unwrapped.episode.tool_context().kernel for env in vector.envs]
        assert all(type(k).__name__ == "RemoteKernel" for k in kernels) and len({k.node for k in kernels}) == 2
        vector.step(batch_actions([Prediction(text="x")] * 2))
    finally:
        vector.close()
    assert wait_for(lambda: not live_kernel_hosts()), "a kernel actor outlived its env"


def test_the_inspect_sandbox_answers_tools_from_a_kernel_on_ray(fault_data: dict[str, Any], ray_address: str) -> None:
    pytest.importorskip("inspect_ai", reason="the inspect extra is not installed")
    import anyio

    from themisto_env.bridges.inspect_sandbox import SandboxConfig, ThemistoSandbox
    from themisto_env.bridges.inspect_task import themisto

    data = {"dataset": fault_data["dataset"], "snapshot_dir": fault_data["snapshot_dir"]}
    first = themisto(data=data["dataset"], snapshot_dir=data["snapshot_dir"], limit=1).dataset[0]
    answers = []

    async def answer(config: SandboxConfig) -> None:
        boxes = await ThemistoSandbox.sample_init("t", config, dict(first.metadata or {}))
        box = boxes["default"].as_type(ThemistoSandbox)
        try:
            answered = await box.call_tool("list_variables", {})
            answers.append((answered.ok, answered.text, type(box.episode.tool_context().kernel).__name__))
        finally:
            await ThemistoSandbox.sample_cleanup("t", config, boxes, False)

    for ray_option in (None, ray_address):
        anyio.run(answer, SandboxConfig(**data, ray=ray_option))
    assert answers[0][:2] == answers[1][:2] and answers[0][0]
    assert [a[2] for a in answers] == ["Kernel", "RemoteKernel"]
    assert wait_for(lambda: not live_kernel_hosts()), "a kernel actor outlived its sandbox"


def test_a_remote_kernel_is_interrupted_at_its_time_limit_and_keeps_its_state(ray_address: str) -> None:
    """The call's own time limit travels with it, and the kernel's process can be interrupted (Ray blocks
    SIGINT in its workers and children inherit the mask): a cell past its limit is interrupted within the
    limit, state kept, as here; so is one in a restarted process."""
    answers = []
    for kernel in (Kernel("local"), RemoteKernel("local", placement=RayPlacement(address=ray_address))):
        with kernel:
            runs = []
            for _ in range(2):
                kernel.execute("kept = 41")
                result = kernel.execute("import time\ntime.sleep(600)", timeout_s=2)
                runs.append((result.status, result.kernel_restarted, result.duration_s < 30))
                kernel.restart()
            kernel.execute("kept = 41")
            answers.append((runs, kernel.execute("kept").status))
    assert answers[0] == answers[1] == ([("timeout", False, True)] * 2, "ok"), answers
