"""Agents by name: ``make_agent("retrieval")``, ``themisto run --agent llm-tools``; ``themisto agents`` lists them.

An agent is found, in this order, as:

- a name of `AGENTS` (the built-in agents, and those added with [`register_agent`][themisto_env.agents.register_agent]);
- a name of the ``themisto_env.agents`` entry-point group, so an installed package offers its agents
  without code here (in its ``pyproject.toml``: ``[project.entry-points."themisto_env.agents"]``
  ``my-agent = "my_package.agents:MyAgent"``);
- ``package.module:Factory`` itself (a module importable from the current folder, too), or
  ``path/to/my_agents.py:Factory`` (a file anywhere; its folder is put on ``sys.path`` to import it).

Targets are ``"module:factory"`` strings; a module is imported only when its agent is made (or described),
so listing names imports nothing (and no LLM provider).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from themisto_env.agents.base import Agent
from themisto_env.errors import ConfigError, did_you_mean

#: Registered agents: name -> ``"module:factory"`` (a class or a function returning an `Agent`).
AGENTS: dict[str, str] = {
    "repeat-previous": "themisto_env.agents.baselines:RepeatPreviousAgent",
    "retrieval": "themisto_env.agents.baselines:RetrievalAgent",
    "runtime-rules": "themisto_env.agents.runtime_rules:RuntimeRulesAgent",
    "runtime-state": "themisto_env.agents.runtime_state:RuntimeStateAgent",
    "llm-static": "themisto_env.agents.llm:StaticContextAgent",
    "llm-full": "themisto_env.agents.llm:FullRuntimeAgent",
    "llm-tools": "themisto_env.agents.llm_tools:ToolUsingAgent",
}


def register_agent(name: str, target: str, *, replace: bool = False) -> None:
    """Make an agent available by name.

    Args:
        name: The name (e.g. ``my-agent``).
        target: ``"package.module:factory"``; the factory is called with the options of
            [`make_agent`][themisto_env.agents.make_agent].
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


ENTRY_POINT_GROUP = "themisto_env.agents"


def agent_targets() -> dict[str, str]:
    """Every agent by name: `AGENTS` and the entry-point group (a registered name wins)."""
    return {**{ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}, **AGENTS}


def _import_file(path: str) -> Any:
    """The module of a Python file, imported once per process under a name of its own (its folder goes on
    ``sys.path`` first, so that it imports its neighbours as a script would)."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    digest = hashlib.sha256(str(file).encode()).hexdigest()[:12]
    module_name = f"themisto_user_agents_{re.sub(r'[^0-9A-Za-z_]', '_', file.stem)}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def load_factory(target: str, *, name: str | None = None) -> Any:
    """Import ``"package.module:factory"`` (a module in the current folder too) or
    ``"path/to/file.py:factory"`` and return the factory.

    Raises:
        ConfigError: The module, file or attribute cannot be imported (the message says why; a module not
            found hints at the file-path form).
    """
    module = target.rpartition(":")[0]  # a Python file (path/to/my_agents.py:Class), or a module
    by_file = module.endswith(".py") or "/" in module or os.sep in module
    module_name, sep, attr = target.rpartition(":") if by_file else target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"an agent target is 'package.module:Class' or 'path/to/file.py:Class', got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` would: modules next to you
        sys.path.insert(0, os.getcwd())
    try:
        factory = _import_file(module_name) if by_file else importlib.import_module(module_name)
        for part in attr.split("."):
            factory = getattr(factory, part)
    except Exception as exc:  # ImportError, AttributeError, and whatever the module raises on import
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.partition(".")[0]:
            hint = (
                f" ({module_name} is neither installed nor in the current folder {os.getcwd()}: give the "
                f"agent by file path, --agent path/to/{module_name.replace('.', '/')}.py:{attr})"
            )
        raise ConfigError(
            f"agent {name or target!r}: cannot import {target}: {type(exc).__name__}: {exc}{hint}"
        ) from exc
    return factory


def agent_observation(name: str) -> str | None:
    """The observation mode the agent named ``name`` is written for (its class's ``observation``), or None
    (any mode, or an agent that cannot be imported: making it will say why)."""
    target = agent_targets().get(name) or (name if ":" in name else None)
    try:
        factory = load_factory(target, name=name) if target else None
    except ConfigError:
        return None
    mode = getattr(factory, "observation", None)
    return mode if isinstance(mode, str) else None


NEEDS_MODEL = "[needs --model]"
"""How ``themisto agents`` marks an agent made from a model (``--model openai/gpt-4o-mini``, ``--model fake``)."""


def describe_agents() -> list[tuple[str, str, str]]:
    """``(name, target, first line of its docstring)`` of every agent (importing each one's module; an
    agent whose module cannot be imported says why instead of a description). An agent made from a model
    (its factory's ``needs_model`` is true, as every `LLMAgent`'s) has ``[needs --model]`` first."""
    described = []
    for name, target in sorted(agent_targets().items()):
        try:
            factory = load_factory(target, name=name)
            doc = inspect.getdoc(factory) or ""
            line = doc.strip().splitlines()[0].replace("``", "") if doc.strip() else ""
            if getattr(factory, "needs_model", False) is True:
                line = f"{NEEDS_MODEL} {line}"
        except Exception as exc:  # a broken plugin must not break the listing
            line = f"(cannot be imported: {type(exc).__name__}: {exc})"
        described.append((name, target, line))
    return described


def make_agent(name: str, **options: Any) -> Agent:
    """Make a registered agent.

    Args:
        name: A key of `AGENTS`, an entry point of the ``themisto_env.agents`` group,
            ``package.module:Factory`` or ``path/to/file.py:Factory``.
        **options: Passed to the agent's factory (e.g. ``provider="openai", model="gpt-4o-mini"`` for the
            LLM agents).

    Returns:
        The agent.

    Raises:
        ConfigError: Unknown name (the message suggests the nearest names), or a target that cannot be
            imported.
    """
    targets = AGENTS if name in AGENTS else agent_targets()
    target = targets.get(name) or (name if ":" in name else None)
    if target is None:
        hint, names = did_you_mean(name, targets, listed=False), ", ".join(sorted(targets))
        raise ConfigError(
            f"no agent named {name!r}{hint} (agents: {names}, or package.module:Class, or path/to/file.py:Class)"
        )
    factory = load_factory(target, name=name)
    is_agent_class = inspect.isclass(factory) and all(callable(getattr(factory, m, None)) for m in ("reset", "act"))
    if target == name and not is_agent_class:  # a path from a config or the CLI: agents only
        raise ConfigError(
            f"{name} is not an agent class (one with reset and act, e.g. a BaseAgent): register a factory "
            "function by name with register_agent instead"
        )
    agent = factory(**options)
    agent.name = name  # results are labelled with the name the agent was made by
    return agent


__all__ = [
    "AGENTS",
    "ENTRY_POINT_GROUP",
    "NEEDS_MODEL",
    "agent_targets",
    "describe_agents",
    "load_factory",
    "make_agent",
    "register_agent",
]
