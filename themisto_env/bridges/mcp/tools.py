"""The MCP server's tools, derived from the env's one tool table (`themisto_env.env.tools.TOOLS`).

An observation tool is listed under its table name, with its args model's JSON schema, its description and
a read-only hint (``readOnlyHint`` is the table's ``read_only``). Beside them are the episode's own tools:
`START` (start a sample: by id, a trajectory's first, or the next one of the served dataset) and the table's
`SUBMIT` (submit a prediction: reward and scores). Attach mode lists the read-only tools only (no episode).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

from themisto_env.data.samples import TaskName
from themisto_env.env.tools import SUBMIT, TOOLS, ToolSpec, task_tools

__all__ = [
    "START",
    "StartArgs",
    "attach_tools",
    "episode_tools",
    "listed_tools",
    "mcp_tool",
]

START = "start_sample"
"""The episode tool that starts a sample."""


class StartArgs(BaseModel):
    """The arguments of `START`: at most one of ``sample_id`` and ``trajectory``; neither starts the next
    sample of the served dataset (in its order: the first at first)."""

    model_config = ConfigDict(extra="forbid")

    sample_id: str | None = Field(
        default=None, description="The sample to start, TRAJECTORY/TASK/STEP (the task must be the server's)."
    )
    trajectory: str | None = Field(default=None, description="Start at this trajectory's first sample.")


_START_TEXT = (
    "Start a sample of the notebook-prediction task: by sample_id, at a trajectory's first sample, or (no "
    "arguments) the next sample of the dataset. Returns the sample's prompt: the execution history (and, in the "
    "output task, the cell about to run). Then query the live kernel state with the other tools and call "
    f"{SUBMIT.name}."
)
_SUBMIT_RETURNS = (
    " Returns the reward and the scores (exact match, ROUGE-L, chrF); the episode then moves on to the "
    "trajectory's next sample, whose prompt is returned too."
)


def mcp_tool(spec: ToolSpec) -> types.Tool:
    """One tool of the table as MCP lists it: name, description, input schema, read-only hint."""
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.args_model.model_json_schema(),
        annotations=types.ToolAnnotations(
            read_only_hint=spec.read_only, destructive_hint=False, idempotent_hint=spec.read_only
        ),
    )


def episode_tools() -> list[types.Tool]:
    """`START` and the table's `SUBMIT` (they change the session's episode: not read-only)."""
    changes = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
    submit = SUBMIT.description + _SUBMIT_RETURNS
    return [
        types.Tool(name=START, description=_START_TEXT, input_schema=_schema(StartArgs), annotations=changes),
        types.Tool(name=SUBMIT.name, description=submit, input_schema=_schema(SUBMIT.args_model), annotations=changes),
    ]


def listed_tools(task: TaskName, observation: str) -> list[types.Tool]:
    """What an episode server lists: the task's observation tools (`task_tools`; none outside the
    ``tools`` observation mode), then the episode's tools."""
    observed = [mcp_tool(spec) for spec in task_tools(task)] if observation == "tools" else []
    return [*observed, *episode_tools()]


def attach_tools() -> list[types.Tool]:
    """What attach mode lists: the read-only tools of the table (no episode, no code run)."""
    return [mcp_tool(spec) for spec in TOOLS.values() if spec.read_only]


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()
