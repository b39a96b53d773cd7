"""A real Ray cluster on this machine: a head node that offers no CPU (the driver's node: nothing is placed
there) and two worker nodes (the CPU nodes). A dataset build (``themisto data build --ray``) and an
evaluation (``themisto run --ray``) put their actors, each with its own local kernels, on the worker nodes;
losing a worker node mid-run scores nothing wrongly and a resume finishes the run; nothing is left running.

Kernels on other machines for a trainer are ``themisto serve`` there (docs/serving.md), not Ray."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.build.test_build_parallel import SOURCES, assert_same_dataset
from tests.build.test_build_parallel import one_kernel as one_kernel
from tests.conftest import needs, wait_for
from tests.env.test_served_states import ALL_SAMPLES
from themisto_env.build.builder import build_dataset
from themisto_env.run.config import RunConfig
from themisto_env.run.results import read_results
from themisto_env.run.runner import run
from themisto_env.sandbox.lifetime.leftovers import collect

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


def test_an_evaluation_on_ray_actors_survives_losing_a_node_and_resumes(
    cluster: Nodes, one_kernel: dict[str, Path], tmp_path: Path
) -> None:
    """``themisto run --ray``: two actors, each with its env and local kernels, run the episodes on the worker
    nodes; the node of one actor is removed mid-episode. The run fails on the lost actor, every row it
    wrote is scored as in a run on this machine (none from a lost kernel), and a resume leaves every row
    scored as on this machine."""
    options = {"snapshot_dir": str(one_kernel["snapshots"]), "sample_rule": ALL_SAMPLES, "warm_kernels": 0}
    # the full observation serves every sample's state (the retrieval agent calls no tool)
    plain = RunConfig(
        agent="retrieval", task="next-cell", observation="full", data=str(one_kernel["dataset"]), env=options
    )
    run(plain, tmp_path / "plain", progress=False)
    clean = {r.sample_id: r for r in read_results(tmp_path / "plain")}
    assert len(clean) >= 6

    marker = tmp_path / "victim"
    agent_file = tmp_path / "node_loss_agent.py"
    agent_file.write_text(NODE_LOSS_AGENT.replace("MARKER_PATH", str(marker)))
    removed: list[str] = []
    done = threading.Event()

    def lose_the_node() -> None:  # the node the agent named, as soon as it names it
        if not wait_for(lambda: done.is_set() or (marker.exists() and marker.read_text()), 600) or done.is_set():
            return
        victim = next(w for w in cluster.workers if w.node_id == marker.read_text())
        removed.append(victim.node_id)
        cluster.cluster.remove_node(victim, allow_graceful=False)
        cluster.workers.remove(victim)

    on_ray = plain.model_copy(update={"agent": f"{agent_file}:NodeLossAgent", "ray": cluster.address, "workers": 2})
    before = {a["ActorID"] for a in actors("EpisodeWorker")}
    root = Path(tempfile.gettempdir())  # where every node's kernels make their run directories (one machine)
    run_dirs = set(root.glob("themisto-kernel-*"))
    loser = threading.Thread(target=lose_the_node)
    loser.start()
    try:
        with pytest.raises(ray.exceptions.RayActorError):
            run(on_ray, tmp_path / "on-ray", progress=False)
    finally:
        done.set()
        loser.join(timeout=120)
        cluster.workers.append(cluster.cluster.add_node(num_cpus=2))  # the next tests have two workers again
        cluster.cluster.wait_for_nodes()
    assert removed, "the run ended before a node was lost"
    first = {r.sample_id: r for r in read_results(tmp_path / "on-ray")}
    assert len(first) < len(clean), "the lost node cost no sample: the test lost nothing"
    for sample_id, row in first.items():
        assert row.scores == clean[sample_id].scores, f"{sample_id} scored differently on the cluster"
        assert row.reward == clean[sample_id].reward
    used = [a for a in actors("EpisodeWorker") if a["ActorID"] not in before]
    assert used and {a["Address"]["NodeID"] for a in used} <= cluster.worker_ids() | set(removed), (
        "an episode ran on the head node"
    )

    run(on_ray, tmp_path / "on-ray", progress=False)  # the resume: only the samples not scored yet
    resumed = {r.sample_id: r for r in read_results(tmp_path / "on-ray")}
    assert sorted(resumed) == sorted(clean)
    assert all((resumed[k].scores, resumed[k].reward) == (clean[k].scores, clean[k].reward) for k in clean)
    assert wait_for(lambda: not alive("EpisodeWorker")), "an episode actor outlived the run"

    def cleared() -> bool:
        # the lost actor's kernels and its reaper ended with it (Ray ends a worker's children), but here the
        # nodes share one disk: its run directories are a dead owner's, which `themisto sandbox gc` removes
        collect([root])
        return not set(root.glob("themisto-kernel-*")) - run_dirs

    assert wait_for(cleared, 120, every=2), "the run left kernel run directories of a live owner"


NODE_LOSS_AGENT = '''
"""The retrieval agent; at its third sample, the first actor there writes its node's id and waits (the test
removes that node meanwhile, and the actor with it)."""
import time

import ray

from themisto_env.agents.baselines import RetrievalAgent

MARKER = "MARKER_PATH"


class NodeLossAgent(RetrievalAgent):
    seen = 0

    def act(self, observation, info):
        type(self).seen += 1
        if type(self).seen == 3:
            try:
                with open(MARKER, "x") as f:  # the first actor only, and never again on a resume
                    f.write(ray.get_runtime_context().get_node_id())
            except FileExistsError:
                pass
            else:
                time.sleep(300)
        return super().act(observation, info)
'''
