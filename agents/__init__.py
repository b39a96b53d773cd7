"""Agents for the Themisto environment: the protocol, a registry by name, baselines and LLM agents.

Importing this package imports no LLM provider and not langchain: agents are made by name with
:func:`make_agent`, which imports the agent's module then.
"""

from __future__ import annotations

from themisto_env.agents.base import Action, Agent, AgentUsage, BaseAgent
from themisto_env.agents.history import HistoryCell, parse_history
from themisto_env.agents.registry import AGENTS, make_agent, register_agent

__all__ = [
    "AGENTS",
    "Action",
    "Agent",
    "AgentUsage",
    "BaseAgent",
    "HistoryCell",
    "make_agent",
    "parse_history",
    "register_agent",
]
