"""Lazy state and warm kernels: the env serves a state only when it is needed, and serves it exactly.

An eager env (``lazy_state=False, warm_kernels=0``: every sample served as it begins, kernels restarted
in place) is the reference: whatever a lazy env skipped, the state a tool then sees is the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.env.state_fixtures import RESTART_STEP, fault_session, write_dataset
from themisto_env.data.samples import SampleRule
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall

ALL_SAMPLES = SampleRule(max_length_quantile=None).model_dump()
EAGER = {"lazy_state": False, "warm_kernels": 0}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lazy-data")
    write_dataset(root / "dataset", [fault_session(root / "slow-flag")], root / "snapshots")
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


def make_env(data: dict[str, Any], **options: Any) -> ThemistoEnv:
    options = {"task": "next-cell", "sample_rule": ALL_SAMPLES, "observation": "tools", **options}
    return ThemistoEnv(**data, **options)


def live(env: ThemistoEnv) -> tuple[Any, ...]:
    """What an agent can learn of the live state: tools' answers, the namespace and its fingerprint. (The
    kernel's resident memory is left out: where none was recorded, at a fresh start, it is the live
    process's, larger in a warm kernel that has the dataset's modules loaded.)"""
    listing = env.step(ToolCall(tool="list_variables"))[0]["tool_result"]
    memory = env.step(ToolCall(tool="memory_usage"))[0]["tool_result"].split("\n", 1)[1]
    kernel = env.episode.tool_context().kernel
    return listing, memory, sorted(kernel.introspect.namespace_state().names), kernel.introspect.fingerprint()


@pytest.fixture(scope="module")
def eager_states(data: dict[str, Any]) -> dict[int, tuple[Any, ...]]:
    """Every sample's live state in an eager env, stepping through the episode."""
    env = make_env(data, tool_budget=10**6, **EAGER)
    states = {}
    try:
        env.reset(options={"trajectory": 0, "sample": 0})
        while True:
            step = env.episode.current_sample.step
            assert env.episode.state_report is not None and env.episode.state_report.check == "verified"
            states[step] = live(env)
            if env.step(Prediction(text=""))[2]:
                return states
    finally:
        env.close()


def pids_alive(pids: list[int]) -> list[int]:
    """The pids among these that still run (a zombie has ended)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.fixture
def env(data: dict[str, Any]) -> Iterator[ThemistoEnv]:
    env = make_env(data, tool_budget=10**6)
    yield env
    env.close()


@pytest.mark.slow
def test_a_tool_after_lazily_skipped_samples_sees_exactly_the_recorded_state(
    env: ThemistoEnv, eager_states: dict[int, tuple[Any, ...]]
) -> None:
    """Predictions without tools move on without touching the kernel; a tool call after 1, 2, 3 ...
    skipped samples (across the display-option cell, which no snapshot holds, and the restart) sees
    the same state as the eager env, verified."""
    steps = sorted(eager_states)
    for skip in (1, 2, 3, 5):
        obs, info = env.reset(options={"trajectory": 0, "sample": 0})
        assert info["state"]["check"] == "not served"
        seen = 0
        while True:
            step = env.episode.current_sample.step
            if seen % skip == skip - 1:
                assert live(env) == eager_states[step], f"skip {skip}, step {step}"
                assert env.episode.state_report.check == "verified", env.episode.state_report
            else:
                assert env.episode.state_report is None, "a sample nothing asked about was served"
            seen += 1
            *_, terminated, _, info = env.step(Prediction(text=""))
            if terminated:
                break
        assert seen == len(steps)


def test_resets_anywhere_then_a_tool_match_the_eager_env(
    env: ThemistoEnv, eager_states: dict[int, tuple[Any, ...]]
) -> None:
    """Random access, both directions, several resets without a tool between them."""
    samples = env.episode.episode_samples["faults-faults"]
    order = [len(samples) - 1, 0, 3, 3, 1, len(samples) - 2, 2]
    for n, index in enumerate(order):
        env.reset(options={"trajectory": 0, "sample": index})
        if n % 2:  # every other reset is left without asking: the next one moves from wherever it is
            continue
        assert live(env) == eager_states[samples[index].step], index


def test_nothing_is_served_or_started_until_a_state_is_needed(data: dict[str, Any]) -> None:
    env = make_env(data, observation="static")
    try:
        env.reset(options={"trajectory": 0, "sample": 0})
        rows = []
        while True:
            *_, terminated, _, info = env.step(Prediction(text=env.episode.current_sample.target))
            rows.append(info)
            if terminated:
                break
        assert all(r["scores"]["exact_match"] == 1.0 for r in rows)
        assert all(r["scored_state"]["check"] == "not served" for r in rows), "scored from the recording"
        assert not any(r.get("state_mismatch") or r.get("infrastructure_error") for r in rows)
        assert not env.episode.server.kernel_owner.started, "a static episode started a kernel"
        assert env.episode.serve_state().check == "verified", "asked for, the last sample's state is served"
    finally:
        env.close()


def test_the_scored_state_is_that_of_the_sample_a_tool_looked_at(data: dict[str, Any]) -> None:
    env = make_env(data)
    try:
        env.reset(options={"trajectory": 0, "sample": 2})
        *_, info = env.step(Prediction(text=""))
        assert info["scored_state"]["check"] == "not served" and info["state"]["check"] == "not served"
        env.step(ToolCall(tool="list_variables"))
        *_, info = env.step(Prediction(text=""))
        assert info["scored_state"]["check"] == "verified" and info["state"]["check"] == "not served"
    finally:
        env.close()


@pytest.mark.slow
def test_warm_kernels_are_handed_out_once_and_closed_with_the_env(data: dict[str, Any]) -> None:
    """The first state and every fresh start (the recorded restart) take a new pooled kernel, with the
    dataset's imports loaded but no user name; none is handed out twice; close leaves none running. (Pooled
    kernels are started ones: with forking off.)"""
    env = make_env(data, fork=False)
    pids: list[int] = []
    try:
        assert env.episode.server.spec.preload, "the dataset's imports are preloaded"
        samples = env.episode.episode_samples["faults-faults"]
        restart = next(i for i, s in enumerate(samples) if s.step == RESTART_STEP)
        env.reset(options={"trajectory": 0, "sample": restart - 1})
        env.episode.serve_state()
        kernel = env.episode.tool_context().kernel
        pids.append(kernel.launcher.pid())
        assert kernel.execute("import sys; print('pandas' in sys.modules)").outputs[0]["text"].strip() == "True"
        env.reset(options={"trajectory": 0, "sample": restart - 1})
        env.step(Prediction(text=""))  # now at the sample after the restart
        assert env.episode.current_sample.step == RESTART_STEP
        kernel = env.episode.tool_context().kernel
        assert kernel.introspect.fingerprint() == {} and kernel.restarts == 0, "a new pooled kernel, not a restart"
        pids.append(kernel.launcher.pid())
        env.episode.server.pool.fill()
        spare = env.episode.server.pool.take()  # the spare the pool refilled: not one handed out before
        pids.append(spare.launcher.pid())
        spare.close()
        assert len(set(pids)) == len(pids), pids
        assert env.episode.tool_context().kernel.launcher.pid() == pids[1]
    finally:
        env.close()
    assert not pids_alive(pids), "a kernel outlived its env"


def test_a_kernel_killed_while_lazily_skipped_is_recovered_when_needed(
    env: ThemistoEnv, eager_states: dict[int, tuple[Any, ...]]
) -> None:
    """A fault met while catching up belongs to the sample being served, which is still verified. (With
    forking, the state may come from a copy of a snapshot's template instead: the dead kernel is then
    replaced without being used, and no fault touches the sample.)"""
    env.reset(options={"trajectory": 0, "sample": 0})
    env.episode.serve_state()
    killed = env.episode.tool_context().kernel.launcher.pid()
    os.kill(killed, 9)
    env.step(Prediction(text=""))
    env.step(Prediction(text=""))
    sample = env.episode.current_sample
    assert live(env) == eager_states[sample.step]
    *_, info = env.step(Prediction(text=""))
    assert info["scored_sample_id"] == sample.id
    assert info["scored_state"]["check"] == "verified", info
    if info["scored_state"].get("served_by") != "fork" or info.get("recovered"):
        assert "KernelDiedError" in info["recovered"][0], info
    assert not info.get("infrastructure_error") and not info.get("state_mismatch")
    assert env.episode.tool_context().kernel.launcher.pid() != killed


@pytest.mark.slow
def test_envs_of_one_kind_share_warm_kernels_and_the_last_close_ends_them(
    data: dict[str, Any], eager_states: dict[int, tuple[Any, ...]]
) -> None:
    """A second env finds a kernel already warm (started while the first worked), never the first
    env's own; closing one env leaves the other's kernel working; closing both leaves nothing."""
    first, second = make_env(data, tool_budget=10**6, fork=False), make_env(data, tool_budget=10**6, fork=False)
    pids: list[int] = []
    try:
        first.reset(options={"trajectory": 0, "sample": 1})
        assert live(first) == eager_states[first.episode.current_sample.step]
        pids.append(first.episode.tool_context().kernel.launcher.pid())
        second.reset(options={"trajectory": 0, "sample": 2})
        assert second.episode.server.pool is first.episode.server.pool, "one pool for envs of one kind"
        assert live(second) == eager_states[second.episode.current_sample.step]
        pids.append(second.episode.tool_context().kernel.launcher.pid())
        assert pids[0] != pids[1], "a kernel is handed out once"
        first.close()
        assert pids_alive(pids) == [pids[1]], "the closed env's kernel is gone, the other's runs"
        assert not second.episode.server.pool.closed
        second.reset(options={"trajectory": 0, "sample": 3})
        assert live(second) == eager_states[second.episode.current_sample.step]
        pool = second.episode.server.pool
    finally:
        first.close()
        second.close()
    assert pool.closed and not pids_alive(pids)


def test_envs_of_one_kind_fork_from_one_template_and_closing_one_leaves_the_other(
    data: dict[str, Any], eager_states: dict[int, tuple[Any, ...]]
) -> None:
    """With forking (the default) two envs' kernels are copies forked from one template, each in the
    recorded state of its own sample, never the same process; closing one env ends its kernel only."""
    first, second = make_env(data, tool_budget=10**6), make_env(data, tool_budget=10**6)
    try:
        first.reset(options={"trajectory": 0, "sample": 1})
        assert live(first) == eager_states[first.episode.current_sample.step]
        second.reset(options={"trajectory": 0, "sample": 2})
        assert live(second) == eager_states[second.episode.current_sample.step]
        kernels = [env.episode.tool_context().kernel for env in (first, second)]
        pids = [kernel.launcher.pid() for kernel in kernels]
        assert pids[0] != pids[1] and all(pids)
        roots = [kernel.launcher.template.base or kernel.launcher.template for kernel in kernels]
        assert roots[0] is roots[1], "one template for envs of one kind"
        assert first.episode.state_report is not None and first.episode.state_report.served_by == "fork"
        first.close()
        assert pids_alive(pids) == [pids[1]], "the closed env's kernel is gone, the other's runs"
        second.reset(options={"trajectory": 0, "sample": 3})
        assert live(second) == eager_states[second.episode.current_sample.step]
    finally:
        first.close()
        second.close()
