"""Agents by name: ``make_agent("retrieval")``, ``themisto run --agent llm-tools``.

:data:`AGENTS` maps a name to a ``"module:factory"`` string; the module is imported only when the agent
is made, so listing names imports nothing (and no LLM provider).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from themisto_env.agents.base import Agent
from themisto_env.errors import ConfigError

#: Registered agents: name -> ``"module:factory"`` (a class or a function returning an :class:`Agent`).
AGENTS: dict[str, str] = {
    "repeat-previous": "themisto_env.agents.baselines:RepeatPreviousAgent",
    "retrieval": "themisto_env.agents.baselines:RetrievalAgent",
    "runtime-rules": "themisto_env.agents.runtime_rules:RuntimeRulesAgent",
    "llm-static": "themisto_env.agents.llm:StaticContextAgent",
    "llm-full": "themisto_env.agents.llm:FullRuntimeAgent",
    "llm-tools": "themisto_env.agents.llm_tools:ToolUsingAgent",
}


def register_agent(name: str, target: str, *, replace: bool = False) -> None:
    """Make an agent available by name.

    Args:
        name: The name (e.g. ``my-agent``).
        target: ``"package.module:factory"``; the factory is called with the options of :func:`make_agent`.
        replace: Allow replacing an existing name.

    Raises:
        ConfigError: The name is taken (without ``replace``) or the target is not ``module:factory``.
    """
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"an agent target is 'package.module:factory', got {target!r}")
    if name in AGENTS and not replace and AGENTS[name] != target:
        raise ConfigError(f"an agent named {name!r} is already registered ({AGENTS[name]}); pass replace=True")
    AGENTS[name] = target


def make_agent(name: str, **options: Any) -> Agent:
    """Make a registered agent.

    Args:
        name: A key of :data:`AGENTS`.
        **options: Passed to the agent's factory (e.g. ``provider="openai", model="gpt-4o-mini"`` for the
            LLM agents).

    Returns:
        The agent.

    Raises:
        ConfigError: Unknown name (the message suggests the nearest names), or a target that cannot be
            imported.
    """
    target = AGENTS.get(name)
    if target is None:
        near = difflib.get_close_matches(name, AGENTS, n=1, cutoff=0.5)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise ConfigError(f"no agent named {name!r}.{hint} Agents: {', '.join(sorted(AGENTS))}")
    module_name, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"agent {name!r}: cannot import {target}: {exc}") from exc
    agent = factory(**options)
    agent.name = name  # results are labelled with the name the agent was made by
    return agent


__all__ = ["AGENTS", "make_agent", "register_agent"]
