"""The env's parts, held on their own: the gym env is a thin adapter over an episode (the turns), a state
server (the live state), a scorer (the rule and the disposable kernels) and a record (samples, tool calls,
budget, faults); each part works without a gym env and gives what the gym env gives."""

from __future__ import annotations

from typing import Any

import pytest

from themisto_env.env.actions import Prediction
from themisto_env.env.config import env_config_and_dataset
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.episode import Episode
from themisto_env.env.outcomes import ToolOutcome
from themisto_env.env.record import MAX_TOOL_REFUNDS, SANDBOX_FAILED, SampleRecord
from themisto_env.env.scorer import Scorer
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import ToolCall


def test_the_gym_env_holds_its_parts_as_members() -> None:
    ours = [cls for cls in ThemistoEnv.__mro__ if cls.__module__.startswith("themisto_env")]
    assert ours == [ThemistoEnv], "no project class among the gym env's bases"
    for part in (Episode, StateServer, Scorer):
        assert not any(cls.__module__.startswith("gymnasium") for cls in part.__mro__), f"{part.__name__} needs no gym"


def _script() -> list[Any]:
    """Tool calls (a good one, one the agent got wrong, a tried cell), predictions of two draws, then on."""
    return [
        ToolCall(tool="list_variables"),
        ToolCall(tool="inspect_variable", args={"name": "no_such_name"}),
        ToolCall(tool="try_cell", args={"code": "y = 2\nprint(y)"}),
        Prediction(text="frame = load()"),
        ToolCall(tool="no_such_tool"),
        Prediction(text=""),
    ]


def test_an_episode_without_gym_steps_as_the_gym_env(env_dataset: dict[str, str]) -> None:
    options = {**env_dataset, "task": "next-cell", "observation": "tools", "tool_cost": 0.05, "attempts": 2}
    env = ThemistoEnv(**options)
    episode = Episode.open(**options)
    try:
        where = {"trajectory": env.episode.episode_ids[0], "sample": 0}
        assert env.reset(options=where) == episode.reset(options=where)
        steps, terminated = 0, False
        while not terminated:
            actions = _script() if steps == 0 else [Prediction(text="x = 1")]
            for action in actions:
                mine, theirs = episode.step(action), env.step(action)
                assert mine == theirs, action
                terminated = theirs[2]
                if terminated:
                    break
            steps += 1
        assert steps > 1, "the episode went on to a later sample"
    finally:
        env.close()
        episode.close()


def test_a_scorer_alone_scores_as_the_env(env_dataset: dict[str, str]) -> None:
    options = {**env_dataset, "task": "next-cell", "observation": "static", "execution_score": True}
    config, dataset = env_config_and_dataset(options)
    env = ThemistoEnv(**options)
    try:
        env.reset(options={"trajectory": env.episode.episode_ids[0], "sample": 0})
        sample = env.episode.current_sample
        assert sample is not None
        with Scorer(config, dataset) as scorer:
            alone = scorer.score(sample, sample.target)
            assert scorer.provider.disposable is not None, "the execution score ran in its disposable kernels"
        assert alone == env.episode.score_prediction(sample.target)
        assert alone.execution_score is not None and alone.reward is not None
    finally:
        env.close()


def test_a_state_server_alone_serves_checks_and_answers_tools(env_dataset: dict[str, str]) -> None:
    config, dataset = env_config_and_dataset({**env_dataset, "task": "next-cell"})
    sample = dataset.samples("next-cell")[-1]
    with StateServer(config, dataset) as server:
        assert not server.kernel_owner.started and server.report is None, "nothing starts before it is needed"
        server.select(dataset.trajectories[sample.trajectory_id], sample.step)
        outcome = server.call_tool(ToolCall(tool="list_variables"))
        assert isinstance(outcome, ToolOutcome) and outcome.result is not None and outcome.result.ok
        assert outcome.faults == () and outcome.error is None
        assert server.report is not None and server.report.check == "verified", "served and checked on demand"
        context = server.tool_context()
        assert context.kernel is server.kernel_owner.kernel and context.try_code is None
    assert not server.kernel_owner.started, "closed with the server"


def test_the_record_counts_pays_and_refunds_in_one_place() -> None:
    record = SampleRecord(tool_budget=2, tool_cost=0.25)
    assert record.invalid_turn("bad").reward == -0.25 and record.tools_left == 1
    call = ToolCall(tool="list_variables")
    for n in range(MAX_TOOL_REFUNDS + 1):  # the sandbox failed the call: given back up to the cap
        turn = record.tool_turn(call, lambda _, n=n: ToolOutcome(None, (f"KernelDiedError: {n}",)))
        assert turn.text == SANDBOX_FAILED and turn.reward == -0.25
    assert record.tools_used == 2 and record.budget_spent, "refunded up to the cap, then counted"
    assert record.faults == [f"KernelDiedError: {n}" for n in range(MAX_TOOL_REFUNDS + 1)]
    assert record.tool_cost_paid == pytest.approx(0.25 * (MAX_TOOL_REFUNDS + 2)), "every call paid"
    assert "Tool budget spent (2 calls" in record.refusal()
    assert record.score_args(None) == {"tools_used": 2, "faults": record.faults, "state_mismatch": None}


@pytest.mark.parametrize(
    ("backend", "fork", "own", "model_code"),
    [
        ("local", True, None, None),
        ("bwrap", True, None, None),
        ("docker", True, "only model-written code is forked", None),
        ("docker", False, "fork=False", "fork=False"),
    ],
)
def test_which_kernels_are_forked_and_why_not(
    env_dataset: dict[str, str], backend: str, fork: bool, own: str | None, model_code: str | None
) -> None:
    """Model-written code is forked where copies are isolated from each other (docker: a uid each; bwrap:
    namespaces each, where the host allows nested user namespaces) or nothing is (local); the reason a kernel
    is started instead is what ``served_by`` shows."""
    from themisto_env.env.kernel_spec import env_kernel_spec

    config, dataset = env_config_and_dataset({**env_dataset, "backend": backend, "fork": fork})
    spec = env_kernel_spec(config, dataset)
    for store_access, expected in (("read", own), ("copy", model_code)):
        reason = spec.with_access(store_access).not_forked
        assert (reason is None) == (expected is None) and (expected is None or expected in str(reason)), reason
