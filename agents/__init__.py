"""Agents for the Themisto environment: the protocol, a registry by name, baselines and LLM agents.

``base`` holds the [`Agent`][themisto_env.agents.Agent] protocol and [`BaseAgent`][themisto_env.agents.BaseAgent];
``registry`` makes agents by name ([`make_agent`][themisto_env.agents.make_agent]); ``baselines``,
``runtime_rules`` and ``runtime_state`` are the offline agents; ``llm`` and ``llm_tools`` the LLM agents,
with their prompts, reply parsing, providers, retries and cache. Importing this package imports no LLM
provider and not langchain: an agent's module is imported when it is made.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
