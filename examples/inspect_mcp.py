"""inspect_ai with the env's tools over MCP: a ``react`` agent whose tools are ``themisto mcp``'s.

The model starts a sample (``start_sample``), queries the live kernel state with the read-only tools, and
submits its prediction (``submit``); the score is the reward ``submit`` answered (the episode's own, the
gym env's), read from its answer's first line by the scorer. Run::

    inspect eval examples/inspect_mcp.py --model openai/gpt-4o-mini --limit 3

(any inspect model; needs ``pip install 'themisto-env[inspect,mcp]'``). Compare: the ``themisto`` task
(``inspect eval themisto_env/themisto``) wires the same tools in process.
"""

from __future__ import annotations

import re

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageTool
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import TaskState

from themisto_env.bridges.mcp.inspect_source import inspect_tools
from themisto_env.env.episode import Episode

PROMPT = (
    "Call start_sample with sample_id {sample_id!r}. Read the prompt it returns, query the kernel's state with "
    "the tools if that helps, then call submit once with your prediction."
)


@scorer(metrics=[mean()])
def mcp_reward():  # type: ignore[no-untyped-def]
    """The reward of the sample's last ``submit`` answer (0 without one)."""

    async def score(state: TaskState, target: Target) -> Score:
        answers = [m for m in state.messages if isinstance(m, ChatMessageTool) and m.function == "submit"]
        for message in reversed(answers):  # "Scored ID: reward 0.4312 (exact_match 0.000, ...)"
            found = re.search(r"^Scored \S+: reward (-?[0-9.]+)", message.text)
            if found:
                return Score(value=float(found.group(1)), explanation=message.text.split("\n")[0])
        return Score(value=0.0, explanation="no submit answer")

    return score


@task
def themisto_over_mcp(task_name: str = "next-cell", limit: int = 3) -> Task:
    """The first ``limit`` samples of a task, each an agent over ``themisto mcp --task TASK_NAME``."""
    with Episode.open(task=task_name) as episode:
        ids = [sample.id for sample in episode.samples][:limit]
    samples = [Sample(id=sample_id, input=PROMPT.format(sample_id=sample_id)) for sample_id in ids]
    agent = react(tools=[inspect_tools("--task", task_name)])
    return Task(dataset=MemoryDataset(samples), solver=agent, scorer=mcp_reward())
