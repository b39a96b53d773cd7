"""The public names of [`themisto_env.agents`][themisto_env.agents], a line each (``__init__.py`` imports each on first
use)."""

from .base import Agent as Agent
from .base import AgentUsage as AgentUsage
from .base import BaseAgent as BaseAgent
from .history import parse_history as parse_history
from .registry import make_agent as make_agent
from .registry import register_agent as register_agent
