"""Agents for the Themisto environment: the protocol, a registry by name, baselines and LLM agents.

Modules:

- ``base``: the [`Agent`][themisto_env.agents.Agent] protocol, [`BaseAgent`][themisto_env.agents.BaseAgent] (a new agent
in a dozen lines),
  [`AgentUsage`][themisto_env.agents.AgentUsage].
- ``registry``: `AGENTS`, [`make_agent`][themisto_env.agents.make_agent],
[`register_agent`][themisto_env.agents.register_agent].
- ``baselines``: ``repeat-previous`` and ``retrieval`` (history only).
- ``runtime_rules``: ``runtime-rules``, which answers from the kernel through the observation tools
  (helped by ``needed_names``: what a cell reads; ``displayed``: what it ends by displaying;
  ``frame_text``: a notebook's DataFrame layout; the tools' answers are read typed).
- ``llm`` and ``llm_tools``: ``llm-static``, ``llm-full``, ``llm-tools`` on any langchain-core chat model;
  ``prompting`` (templates in ``prompts/default.yaml``), ``parsing`` (reading replies), ``providers``
  (`make_chat_model`), ``fake_chat`` (a scripted model).
- ``history``: the observation's history text read back into cells.

Importing this package imports no LLM provider and not langchain: agents are made by name with
[`make_agent`][themisto_env.agents.make_agent], which imports the agent's module then.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
