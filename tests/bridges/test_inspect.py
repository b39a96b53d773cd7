"""The inspect_ai task: an in-process ``inspect_ai.eval`` over a few samples on local kernels."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("inspect_ai", reason="inspect_ai is not installed (pip install -e '.[inspect]'; CI installs it)")

import anyio
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log
from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage, get_model
from inspect_ai.util import SandboxUserUnsupportedError

from themisto_env.agents.prompting import load_prompts
from themisto_env.bridges.inspect_sandbox import SandboxConfig, ThemistoSandbox
from themisto_env.bridges.inspect_task import themisto
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.metrics import score
from themisto_env.scoring.rule import ScoringRule
from themisto_env.scoring.score import score_sample

MODEL = "mockllm/model"
ANSWER = "```python\nsales.head()\n```"
USAGE = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # mockllm counts with tiktoken otherwise (online)


def _reply(messages: list[Any], tools: list[Any], tool_choice: Any, config: Any) -> ModelOutput:
    """A model that first lists the variables (when it has tools), then answers."""
    if tools and not any(isinstance(m, ChatMessageTool) for m in messages):
        output = ModelOutput.for_tool_call(MODEL, "list_variables", {})
    else:
        output = ModelOutput.from_content(MODEL, ANSWER)
    output.usage = USAGE
    return output


def _kernels() -> set[int]:
    """Kernel processes started by this test process (one that ends while it is looked at is gone already:
    a kernel forked from a template is reaped by the template, and may be a zombie for a moment)."""
    found = set()
    for process in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if any("ipykernel" in part for part in process.cmdline()):
                found.add(process.pid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def no_kernel_left() -> Iterator[None]:
    before = _kernels()
    yield
    left = _kernels() - before
    assert not left, f"kernel processes left running: {left}"


def _env_tool_result(env_dataset: dict[str, str], metadata: dict[str, Any], tool: str) -> tuple[str, dict[str, Any]]:
    """What our env's tool answers at a sample, and the env's first observation there."""
    env = ThemistoEnv(dataset=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"])
    try:
        where = {"trajectory": metadata["trajectory_id"], "sample": metadata["sample_index"]}
        observation, _ = env.reset(options=where)
        answered, *_ = env.step(ToolCall(tool=tool, args={}))
        return str(answered["tool_result"]), observation
    finally:
        env.close()


@pytest.mark.slow
def test_inspect_eval_scores_with_our_metrics_and_tools_reach_the_kernel(
    env_dataset: dict[str, str], tmp_path: Path, no_kernel_left: None
) -> None:
    task = themisto(data=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"], limit=3)
    model = get_model(MODEL, custom_outputs=_reply)
    [log] = inspect_eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")

    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == 3
    prompts = load_prompts()
    for sample in log.samples:
        assert sample.error is None
        value = sample.scores["themisto_scorer"].value
        assert isinstance(value, dict)
        assert sample.scores["themisto_scorer"].answer == "sales.head()"
        rule = ScoringRule(tool_cost=0.01)  # the task's default tool cost
        scored = score_sample("sales.head()", str(sample.target), task="next-cell", rule=rule, tools_used=1)
        expected_value = {**score("sales.head()", str(sample.target)).as_dict(), "reward": scored.reward}
        assert value == pytest.approx(expected_value), "one list_variables call: the env's reward less its cost"
        tool_messages = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
        assert [m.function for m in tool_messages] == ["list_variables"]
        expected, observation = _env_tool_result(env_dataset, sample.metadata, "list_variables")
        assert tool_messages[0].text == expected
        assert sample.input[1].text == prompts.user_text(observation, "next-cell", "tools")  # type: ignore[index]
    assert log.results is not None
    means = {s.name: s.metrics["mean"].value for s in log.results.scores}
    for name in ("exact_match", "rouge_l", "chrf"):
        values = [sample.scores["themisto_scorer"].value[name] for sample in log.samples]  # type: ignore[index]
        assert means[name] == pytest.approx(sum(values) / len(values))

    reread = read_eval_log(log.location)  # what `inspect view` shows
    assert reread.samples is not None and len(reread.samples) == 3
    assert Path(log.location).is_file()


def _greedy(messages: list[Any], tools: list[Any], tool_choice: Any, config: Any) -> ModelOutput:
    """A model that calls a tool whenever it has tools, else answers."""
    output = (
        ModelOutput.for_tool_call(MODEL, "list_variables", {}) if tools else ModelOutput.from_content(MODEL, ANSWER)
    )
    output.usage = USAGE
    return output


@pytest.mark.slow
def test_a_spent_budget_takes_the_tools_away_and_the_execution_score_runs_the_answer(
    env_dataset: dict[str, str], tmp_path: Path, no_kernel_left: None
) -> None:
    task = themisto(
        data=env_dataset["dataset"],
        snapshot_dir=env_dataset["snapshot_dir"],
        limit=1,
        tool_budget=1,
        execution_score=True,
    )
    [log] = inspect_eval(task, model=get_model(MODEL, custom_outputs=_greedy), log_dir=str(tmp_path), display="none")

    assert log.status == "success", log.error
    assert log.samples is not None
    [sample] = log.samples
    assert [m.function for m in sample.messages if isinstance(m, ChatMessageTool)] == ["list_variables"]
    assert any(m.role == "user" and m.text == load_prompts().budget_spent for m in sample.messages)
    assert sample.scores["themisto_scorer"].answer == "sales.head()"
    execution = sample.scores["themisto_execution_scorer"]
    assert isinstance(execution.value, float) and 0.0 <= execution.value <= 1.0
    assert execution.metadata is not None and "passed" in execution.metadata


@pytest.mark.slow
def test_the_sandbox_runs_python_in_a_copy_and_refuses_the_rest(
    env_dataset: dict[str, str], no_kernel_left: None
) -> None:
    config = SandboxConfig(dataset=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"], tool_budget=2)
    first = themisto(data=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"], limit=1).dataset[0]

    async def scenario() -> None:
        boxes = await ThemistoSandbox.sample_init("t", config, dict(first.metadata or {}))
        box = boxes["default"].as_type(ThemistoSandbox)
        try:
            ran = await box.exec(["python", "-c", "print(sum(range(4)))"])
            assert ran.success and "6" in ran.stdout
            assert box.tools_left == 1
            refused = await box.exec(["ls"])
            assert refused.returncode == 127 and box.tools_left == 1
            with pytest.raises(SandboxUserUnsupportedError):
                await box.exec(["sh"], user="root")
            with pytest.raises(PermissionError):
                await box.read_file("data.csv")
            assert (await box.call_tool("list_variables", {})).ok
            spent = await box.call_tool("list_variables", {})
            assert not spent.ok and "budget" in spent.text and box.tools_left == 0
        finally:
            await ThemistoSandbox.sample_cleanup("t", config, boxes, False)

    anyio.run(scenario)


def test_the_output_task_shows_the_cell_about_to_run(env_dataset: dict[str, str]) -> None:
    task = themisto(task="output", data=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"])
    env = ThemistoEnv(task="output", dataset=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"])
    try:
        ours_by_id = {s.id: s for s in env.episode.samples}  # the task's dataset is in --limit's selection order
        assert sorted(s.id for s in task.dataset) == sorted(ours_by_id)
        for sample in task.dataset:
            ours = ours_by_id[str(sample.id)]
            cell = env.episode.trajectories[ours.trajectory_id].steps[ours.step].source
            assert sample.target == ours.target
            assert f"```python\n{cell}" in sample.input[1].text  # type: ignore[index]
    finally:
        env.close()


@pytest.mark.slow
def test_the_full_observation_puts_the_live_runtime_dump_in_the_prompt(
    env_dataset: dict[str, str], tmp_path: Path, no_kernel_left: None
) -> None:
    task = themisto(observation="full", data=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"], limit=1)
    [log] = inspect_eval(task, model=get_model(MODEL, custom_outputs=_reply), log_dir=str(tmp_path), display="none")

    assert log.status == "success", log.error
    assert log.samples is not None
    [sample] = log.samples
    assert "The kernel's state now" not in sample.input[1].text  # type: ignore[index]
    assert "The kernel's state now" in sample.messages[1].text
    assert not any(isinstance(m, ChatMessageTool) for m in sample.messages)
