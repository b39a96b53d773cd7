"""Agents by file path (``--agent path/to/my_agents.py:Class``), and a module not found says so (issue 22)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from themisto_env.agents.registry import make_agent
from themisto_env.errors import ConfigError

AGENT_FILE = """
from helper_next_to_it import TEXT
from themisto_env.agents import BaseAgent
from themisto_env.env.actions import Prediction


class FileAgent(BaseAgent):
    '''Predicts a constant.'''

    def decide(self, observation, info):
        return Prediction(text=TEXT)
"""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding my_agents.py (and a module it imports), and a working folder that is not it."""
    folder = tmp_path / "lab" / "agents"
    folder.mkdir(parents=True)
    (folder / "my_agents.py").write_text(AGENT_FILE)
    (folder / "helper_next_to_it.py").write_text("TEXT = 'df.head()'\n")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # the file's folder is added: undo after
    return folder


def test_an_agent_by_relative_and_absolute_file_path(elsewhere: Path) -> None:
    relative = os.path.relpath(elsewhere / "my_agents.py")
    agent = make_agent(f"{relative}:FileAgent")
    assert agent.decide({}, {}).text == "df.head()" and agent.name == f"{relative}:FileAgent"
    again = make_agent(f"{elsewhere / 'my_agents.py'}:FileAgent")
    assert type(again) is type(agent)  # one module per file and process


def test_a_wrong_file_or_class_is_one_clear_error(elsewhere: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such file: nowhere/my_agents\.py"):
        make_agent("nowhere/my_agents.py:FileAgent")
    with pytest.raises(ConfigError, match=r"AttributeError.*NoAgent"):
        make_agent(f"{elsewhere / 'my_agents.py'}:NoAgent")


def test_a_module_from_another_folder_hints_at_the_file_path(elsewhere: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"neither installed nor in the current folder .*--agent path/to/my_agents.py:"
    ):
        make_agent("my_agents:FileAgent")
