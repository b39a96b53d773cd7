"""A real Ray cluster on this machine: a head node that offers no CPU (the trainer's GPU node: nothing is
placed there) and two worker nodes (the CPU nodes). A dataset build, an evaluation and a short multi-turn
GRPO run put their kernels on the worker nodes; losing a worker node mid-run scores nothing wrongly, the
run completes and a resume finishes it; nothing is left running."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.bridges.rl.conftest import train_example
from tests.build.test_build_parallel import SOURCES, assert_same_dataset
from tests.build.test_build_parallel import one_kernel as one_kernel
from tests.conftest import needs, wait_for
from tests.env.test_served_states import ALL_SAMPLES
from tests.env.test_served_states import fault_data as fault_data
from themisto_env.build.builder import build_dataset
from themisto_env.run.config import RunConfig
from themisto_env.run.results import read_results
from themisto_env.run.runner import run

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'themisto-env[ray]'")


@dataclass
class Nodes:
    """The cluster and its nodes."""

    cluster: Any
    head: Any
    workers: list[Any]

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def worker_ids(self) -> set[str]:
        return {w.node_id for w in self.workers}


@pytest.fixture(scope="module")
@needs("ray")
def cluster() -> Iterator[Nodes]:
    """A head node with no CPU to offer and two worker nodes of two CPUs each (Ray's accounting)."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        workers = [made.add_node(num_cpus=2) for _ in range(2)]
        made.wait_for_nodes()
        ray.init(address=made.address, log_to_driver=False, configure_logging=False)
        yield Nodes(made, made.head_node, workers)
    finally:
        ray.shutdown()
        made.shutdown()


def actors(class_name: str) -> list[dict[str, Any]]:
    """Every actor of that class the cluster knows (alive or dead), with its node."""
    from ray._private import state

    return [a for a in state.actors().values() if a["ActorClassName"] == class_name]


def alive(class_name: str) -> list[dict[str, Any]]:
    return [a for a in actors(class_name) if a["State"] != "DEAD"]


def test_a_build_on_the_cluster_builds_what_one_kernel_builds(
    cluster: Nodes, one_kernel: dict[str, Path], tmp_path: Path
) -> None:
    before = {a["ActorID"] for a in actors("SessionReplayer")}
    out, store = tmp_path / "dataset", one_kernel["snapshots"]
    report = build_dataset(SOURCES, out, snapshot_dir=store, workers=2, ray=cluster.address, progress=False)
    assert len(report.built) == 4 and not report.failed, report
    assert_same_dataset(tmp_path / "dataset", one_kernel["dataset"], one_kernel["snapshots"])
    used = [a for a in actors("SessionReplayer") if a["ActorID"] not in before]
    assert used and {a["Address"]["NodeID"] for a in used} <= cluster.worker_ids(), "a build worker ran on the head"
    assert wait_for(lambda: not alive("SessionReplayer")), "a build worker outlived the build"


def test_an_evaluation_on_worker_node_kernels_survives_losing_a_node_and_resumes(
    cluster: Nodes, fault_data: dict[str, Any], tmp_path: Path
) -> None:
    """The run's kernel lives on a worker node (one env, no warm kernel: the only kernel actor is the env's);
    that node is removed mid-run.
    Every row is then either scored as in a run on this machine or flagged (never scored from a lost
    kernel), the run completes, and a resume leaves every row scored as on this machine."""
    options = {"snapshot_dir": fault_data["snapshot_dir"], "sample_rule": ALL_SAMPLES, "warm_kernels": 0}
    # the full observation serves every sample's state (the retrieval agent calls no tool)
    plain = RunConfig(agent="retrieval", task="next-cell", observation="full", data=fault_data["dataset"], env=options)
    run(plain, tmp_path / "plain", progress=False)
    clean = {r.sample_id: r for r in read_results(tmp_path / "plain")}
    assert len(clean) >= 6

    removed: list[str] = []
    agent_file = tmp_path / "node_loss_agent.py"
    agent_file.write_text(NODE_LOSS_AGENT)
    sys.modules.pop("node_loss_agent", None)

    def lose_a_node(seen: int) -> None:  # at the third sample: the node holding the most kernels goes
        if seen != 3 or removed:
            return
        hosts = [a["Address"]["NodeID"] for a in alive("KernelHost")]
        victim = max(cluster.workers, key=lambda w: hosts.count(w.node_id))
        assert hosts.count(victim.node_id) >= 1, "no kernel on a worker node to lose"
        removed.append(victim.node_id)
        cluster.cluster.remove_node(victim, allow_graceful=False)
        cluster.workers.remove(victim)

    on_ray = plain.model_copy(
        update={"agent": f"{agent_file}:NodeLossAgent", "env": {**options, "ray": cluster.address}}
    )
    try:
        CALLBACK.append(lose_a_node)
        run(on_ray, tmp_path / "on-ray", progress=False)
    finally:
        CALLBACK.clear()
        cluster.workers.append(cluster.cluster.add_node(num_cpus=2))  # the next tests have two workers again
        cluster.cluster.wait_for_nodes()
    assert removed, "the run ended before a node was lost"
    met = [r for r in read_results(tmp_path / "on-ray") if r.infrastructure_error or r.recovered]
    assert met, "no row met the lost node: the test lost nothing"
    first = {r.sample_id: r for r in read_results(tmp_path / "on-ray")}
    assert sorted(first) == sorted(clean)
    for sample_id, row in first.items():
        if row.infrastructure_error or row.state_mismatch:
            assert row.reward is None, f"{sample_id} was scored from a lost kernel"
        else:
            assert row.scores == clean[sample_id].scores, f"{sample_id} scored differently on the cluster"
            assert row.reward == clean[sample_id].reward
    hosts = {a["Address"]["NodeID"] for a in actors("KernelHost")}
    assert hosts and hosts <= cluster.worker_ids() | set(removed), "a kernel ran on the head node"

    run(on_ray, tmp_path / "on-ray", progress=False)  # the resume: only the flagged rows again
    resumed = {r.sample_id: r for r in read_results(tmp_path / "on-ray")}
    assert all(resumed[k].reward is not None for k in clean), "a resume left a row unscored"
    assert all((resumed[k].scores, resumed[k].reward) == (clean[k].scores, clean[k].reward) for k in clean)
    assert wait_for(lambda: not alive("KernelHost")), "a kernel actor outlived the run"


@pytest.mark.timeout(900)
def test_multi_turn_grpo_trains_with_its_kernels_on_the_worker_nodes(
    cluster: Nodes, training_data: dict[str, str], tmp_path: Path
) -> None:
    before = {a["ActorID"] for a in actors("KernelHost")}
    options = ("--steps", "2", "--samples", "4", "--warm-start", "100", "--ray", cluster.address)
    done = train_example("train_grpo_tools.py", tmp_path, training_data, *options, "--split", "none")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["rewards"]) == 2 and summary["kernels"] >= 1
    used = [a for a in actors("KernelHost") if a["ActorID"] not in before]
    assert used, "the training's kernels did not run on Ray"
    assert {a["Address"]["NodeID"] for a in used} <= cluster.worker_ids(), "a kernel ran on the trainer's node"
    assert wait_for(lambda: not alive("KernelHost")), "a kernel actor outlived the training"


#: Set by the node-loss test: called with the number of samples the agent has seen.
CALLBACK: list[Callable[[int], None]] = []

NODE_LOSS_AGENT = '''
"""The retrieval agent, telling the test how many samples it has seen (the test removes a node then)."""
from tests.bridges.rl.test_ray_cluster import CALLBACK
from themisto_env.agents.baselines import RetrievalAgent


class NodeLossAgent(RetrievalAgent):
    seen = 0

    def act(self, observation, info):
        type(self).seen += 1
        for callback in CALLBACK:
            callback(type(self).seen)
        return super().act(observation, info)
'''
