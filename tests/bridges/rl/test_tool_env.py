"""TRL's multi-turn environment: tools answered from the sample's recorded state, shared by a GRPO group,
rewards from the env's metrics, and no reward where the machinery failed."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv, tool_dataset
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.metrics import reward, score

#: Every observation tool a rollout can call, with arguments valid in the sales notebook's later states.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_variables", {}),
    ("inspect_variable", {"name": "sales"}),
    ("dataframe_head", {"name": "sales", "n": 3}),
    ("dataframe_info", {"name": "sales"}),
    ("memory_usage", {}),
    ("get_source", {"name": "total"}),
]


def call_all(rollout: ThemistoToolEnv) -> list[str]:
    return [getattr(rollout, tool)(**args) for tool, args in CALLS]


def eager_answers(env_dataset: dict[str, str], sample_id: str) -> tuple[list[str], Any]:
    """The same calls through an eager env's step API, and its kernel's namespace and fingerprint."""
    env = ThemistoEnv(task="next-cell", lazy_state=False, warm_kernels=0, tool_budget=100, **env_dataset)
    try:
        index = next((t, i) for t, s in env.episode_samples.items() for i, x in enumerate(s) if x.id == sample_id)
        env.reset(options={"trajectory": index[0], "sample": index[1]})
        answers = [env.step(ToolCall(tool=tool, args=args))[0]["tool_result"] for tool, args in CALLS]
        kernel = env.tool_context().kernel
        return answers, (sorted(kernel.namespace_state().names), kernel.fingerprint())
    finally:
        env.close()


@pytest.fixture(scope="module")
def late_sample(env_dataset: dict[str, str]) -> str:
    """A sample after ``total`` and ``sales`` exist."""
    rows = tool_dataset("next-cell", **env_dataset)
    return str(rows[-2]["sample_id"])


def test_a_group_shares_one_kernel_that_no_rollout_alters(env_dataset: dict[str, str], late_sample: str) -> None:
    expected, expected_state = eager_answers(env_dataset, late_sample)
    # No answer cache: every rollout's calls reach the shared kernel.
    with SharedStates(task="next-cell", tool_budget=100, cache_answers=False, **env_dataset) as states:
        group = [ThemistoToolEnv(states) for _ in range(4)]
        for rollout in group:
            assert rollout.reset(sample_id=late_sample) is not None  # the submit instruction
        answers = [call_all(group[0])]
        kernel = states._owned[0].tool_context().kernel
        before = kernel.namespace_state()
        answers += [call_all(rollout) for rollout in group[1:]]  # one after the other, each every tool
        assert all(a == expected for a in answers), "a rollout saw another state than the recording's"
        assert len(states._owned) == 1, "one kernel for the group"
        assert kernel.namespace_state() == before, "names, values' ids, _ and the execution counter untouched"
        assert (sorted(before.names), kernel.fingerprint()) == expected_state


@pytest.mark.slow
def test_without_sharing_each_rollout_has_its_own_kernel(env_dataset: dict[str, str], late_sample: str) -> None:
    expected, _ = eager_answers(env_dataset, late_sample)
    with SharedStates(task="next-cell", share=False, tool_budget=100, **env_dataset) as states:
        group = [ThemistoToolEnv(states) for _ in range(3)]
        for rollout in group:
            rollout.reset(sample_id=late_sample)
        assert all(call_all(rollout) == expected for rollout in group)
        pids = {env.tool_context().kernel.launcher.pid() for env in states._owned}
        assert len(states._owned) == 3 and len(pids) == 3


@pytest.mark.slow
def test_more_samples_than_kernels_move_the_least_recently_used(env_dataset: dict[str, str]) -> None:
    rows = tool_dataset("next-cell", **env_dataset)
    chosen = [str(rows[i]["sample_id"]) for i in (-2, 2, -3, -2)]
    with SharedStates(task="next-cell", max_kernels=2, tool_budget=100, **env_dataset) as states:
        for sample_id in chosen:
            env = ThemistoEnv(task="next-cell", lazy_state=False, warm_kernels=0, **env_dataset)
            try:
                index = next(
                    (t, i) for t, s in env.episode_samples.items() for i, x in enumerate(s) if x.id == sample_id
                )
                env.reset(options={"trajectory": index[0], "sample": index[1]})
                want = env.step(ToolCall(tool="list_variables"))[0]["tool_result"]
            finally:
                env.close()
            rollout = ThemistoToolEnv(states)
            rollout.reset(sample_id=sample_id)
            assert rollout.list_variables() == want, sample_id
        assert len(states._owned) == 2


def test_the_reward_is_the_env_metric_of_the_submitted_prediction(
    env_dataset: dict[str, str], late_sample: str
) -> None:
    with SharedStates(task="next-cell", tool_budget=2, tool_cost=0.05, **env_dataset) as states:
        target = states.samples[late_sample].target
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        assert rollout.get_reward() == reward(score("", target)), "nothing submitted: an empty prediction"
        rollout.list_variables()
        rollout.submit("print(total(sales))")
        rollout.submit(target)  # the last one counts
        assert rollout.get_reward() == pytest.approx(1.0 - 0.05)
        rollout.list_variables()
        assert "budget" in rollout.list_variables(), "the third call is over the budget"
        assert rollout.get_reward() == pytest.approx(1.0 - 0.1)
        rollout.reset(sample_id=late_sample)
        assert rollout.answer is None and rollout.tool_calls == []


def test_a_rollout_the_machinery_failed_gets_no_reward_and_the_next_one_is_served_again(
    env_dataset: dict[str, str], late_sample: str
) -> None:
    expected, _ = eager_answers(env_dataset, late_sample)
    with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as states:
        first, second = ThemistoToolEnv(states), ThemistoToolEnv(states)
        first.reset(sample_id=late_sample)
        second.reset(sample_id=late_sample)
        first.list_variables()
        os.kill(states._owned[0].tool_context().kernel.launcher.pid(), signal.SIGKILL)
        assert "sandbox failed" in first.memory_usage()  # not asked before: it reaches the dead kernel
        first.submit(states.samples[late_sample].target)
        assert first.get_reward() is None, "an infrastructure failure is never scored"
        assert call_all(second) == expected, "recovered: the same recorded state"
        second.submit(states.samples[late_sample].target)
        assert second.get_reward() == pytest.approx(1.0 - 0.01 * len(CALLS))


def test_trl_reads_the_tools_schemas(env_dataset: dict[str, str]) -> None:
    """TRL builds each tool's schema from its type hints and docstring (transformers' get_json_schema)."""
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    with SharedStates(task="next-cell", **env_dataset) as states:
        rollout = states.factory()()
        names = {}
        for name in (
            "list_variables",
            "inspect_variable",
            "dataframe_head",
            "dataframe_info",
            "memory_usage",
            "get_source",
            "submit",
        ):
            schema = get_json_schema(getattr(rollout, name))["function"]
            names[schema["name"]] = set(schema["parameters"].get("properties", {}))
        assert names["dataframe_head"] == {"name", "n"} and names["submit"] == {"prediction"}
        assert names["list_variables"] == set()


def test_predictions_never_reach_the_shared_kernel(env_dataset: dict[str, str], late_sample: str) -> None:
    """Under the execution score a submitted prediction runs in a disposable kernel only."""
    with SharedStates(task="next-cell", execution_score=True, tool_budget=100, **env_dataset) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        before = rollout.list_variables()
        rollout.submit("hacked = 1\nsales.drop(columns=['units'], inplace=True)")
        value = rollout.get_reward()
        assert value is not None and value < 0.5
        other = ThemistoToolEnv(states)
        other.reset(sample_id=late_sample)
        assert other.list_variables() == before and "hacked" not in before
        env = states._owned[0]
        assert env.step(Prediction(text="")) is not None  # the shared env itself still steps


def test_a_groups_repeated_calls_are_answered_once_and_the_same(env_dataset: dict[str, str], late_sample: str) -> None:
    expected, _ = eager_answers(env_dataset, late_sample)
    with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as states:
        group = [ThemistoToolEnv(states) for _ in range(3)]
        for rollout in group:
            rollout.reset(sample_id=late_sample)
        assert call_all(group[0]) == expected
        kernel = states._owned[0].tool_context().kernel
        count = kernel.namespace_state().execution_count
        requests = states._owned[0]._tools_used
        assert all(call_all(rollout) == expected for rollout in group[1:])
        assert states._owned[0]._tools_used == requests, "answered from the group's first calls"
        assert kernel.namespace_state().execution_count == count
        assert all(len(rollout.tool_calls) == len(CALLS) for rollout in group), "each rollout pays for its calls"
