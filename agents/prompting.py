"""The LLM agents' prompts: templates loaded from YAML data, and the messages built from an observation.

The bundled templates are ``prompts/default.yaml`` (its header documents the placeholders and how a
user message is put together); pass another file's path as ``prompts=`` to an LLM agent to change the
wording without touching code.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.errors import ConfigError

ContextMode = Literal["static", "full", "tools"]


class TaskTexts(BaseModel):
    """One text per task: ``{"next-cell": ..., "output": ...}``."""

    next_cell: str = Field(alias="next-cell")
    output: str

    def for_task(self, task: str) -> str:
        """The text of a task (``next-cell`` or ``output``)."""
        return self.next_cell if task == "next-cell" else self.output


class Sections(BaseModel):
    """The parts of a user message."""

    model_config = ConfigDict(extra="forbid")

    history: str
    no_history: str
    runtime: str
    cell: str
    tools: str


class PromptTemplates(BaseModel):
    """The LLM agents' prompt templates (see ``prompts/default.yaml``; other top-level keys are ignored)."""

    system: TaskTexts
    sections: Sections
    instructions: TaskTexts
    budget_spent: str
    tool_not_run: str

    def system_text(self, task: str) -> str:
        """The system message for a task."""
        return self.system.for_task(task)

    def user_text(self, observation: Mapping[str, Any], task: str, mode: ContextMode) -> str:
        """The user message for an observation.

        Args:
            observation: The env's observation.
            task: ``next-cell`` or ``output``.
            mode: Which context to include: ``static`` (history), ``full`` (history and the runtime dump),
                ``tools`` (history and the tool invitation).

        Returns:
            The sections that apply, then the task's instruction, separated by blank lines.
        """
        history = str(observation.get("history", "")).strip("\n")
        parts = [self.sections.history.format(history=history) if history else self.sections.no_history]
        runtime = str(observation.get("runtime", "")).strip("\n")
        if mode == "full" and runtime:
            parts.append(self.sections.runtime.format(runtime=runtime))
        if task == "output":
            parts.append(self.sections.cell.format(cell=str(observation.get("cell", "")).strip("\n")))
        if mode == "tools":
            parts.append(self.sections.tools.format(tools_left=observation.get("tools_left", 0)))
        parts.append(self.instructions.for_task(task))
        return "\n\n".join(parts)


def load_prompts(path: str | Path | None = None) -> PromptTemplates:
    """Load prompt templates.

    Args:
        path: A YAML file in the format of ``prompts/default.yaml``; None for the bundled one.

    Returns:
        The templates.

    Raises:
        ConfigError: The file is missing, not YAML, or lacks a template (the message names it).
    """
    try:
        if path is None:
            text = resources.files("themisto_env.agents").joinpath("prompts/default.yaml").read_text("utf-8")
            where = "the bundled prompts/default.yaml"
        else:
            text, where = Path(path).read_text("utf-8"), str(path)
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read prompt templates from {path or 'the package'}: {exc}") from exc
    try:
        templates = PromptTemplates.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"prompt templates in {where} are incomplete or malformed: {exc!r}") from exc
    for section, template in templates.sections.model_dump().items():
        try:
            template.format(**_PLACEHOLDERS)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"prompt templates in {where}: sections.{section} has a bad placeholder ({exc!r}); "
                f"the placeholders are {', '.join('{' + name + '}' for name in _PLACEHOLDERS)} "
                "(write a literal brace as {{ or }})"
            ) from exc
    return templates


_PLACEHOLDERS = {"history": "", "cell": "", "runtime": "", "tools_left": 0}


__all__ = ["ContextMode", "PromptTemplates", "load_prompts"]
