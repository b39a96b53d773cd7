"""One error style at every entry point (issue 44): the CLI, a config file, ``gym.make`` and ``EnvConfig``
answer an unknown or invalid option with one line naming it and the nearest valid one, all through
`themisto_env.errors.did_you_mean` (its one home)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import themisto_env  # noqa: F401  (registers the ids)
from themisto_env.cli import main
from themisto_env.env import EnvConfig
from themisto_env.errors import ConfigError, did_you_mean
from themisto_env.run.config import load_run_config

ROOT = Path(__file__).resolve().parents[2]


def one_line(text: str) -> str:
    assert "\n" not in text.strip() and "pydantic" not in text, text
    return text.strip()


def test_did_you_mean() -> None:
    assert did_you_mean("tool", ["static", "full", "tools"]) == "; did you mean 'tools'?"
    assert did_you_mean("zzz", ["a", "b"]) == "; valid: a, b"
    assert did_you_mean("zzz", ["a", "b"], listed=False) == ""


def test_gym_make() -> None:
    with pytest.raises(ConfigError) as caught:
        gym.make("themisto/NextCell-v0", tool_budgte=1)
    assert one_line(str(caught.value)).endswith("tool_budgte: no such option; did you mean 'tool_budget'?")
    with pytest.raises(ConfigError) as caught:
        gym.make("themisto/NextCell-v0", bad_option=1)
    assert "bad_option: no such option; valid: task, dataset" in one_line(str(caught.value))


def test_env_config() -> None:
    with pytest.raises(ConfigError) as caught:
        EnvConfig(observation="tool")  # type: ignore[arg-type]
    assert one_line(str(caught.value)) == (
        "invalid environment options: observation: 'tool' is not one of static, full, tools; did you mean 'tools'?"
    )
    with pytest.raises(ConfigError, match=r"reward\.rogue_l: no such option; did you mean 'rouge_l'\?"):
        EnvConfig(reward={"rogue_l": 1})  # type: ignore[arg-type]


def test_config_file(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("agnet: retrieval\n")
    with pytest.raises(ConfigError) as caught:
        load_run_config(config)
    assert one_line(str(caught.value)) == f"{config}: agnet: no such option; did you mean 'agent'?"
    config.write_text("task: outptu\n")
    with pytest.raises(ConfigError, match=r"task: 'outptu' is not one of next-cell, output; did you mean 'output'\?"):
        load_run_config(config)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["run", "--tol-budget", "3"],
            "error: themisto run: no such option --tol-budget; did you mean '--tool-budget'?",
        ),
        (["rnu"], "error: themisto: no such command 'rnu'; did you mean 'run'?"),
        (["data", "bild"], "error: themisto data: no such command 'bild'; did you mean 'build'?"),
        (
            ["run", "--task", "outptu"],
            "error: run options: task: 'outptu' is not one of next-cell, output; did you mean 'output'?",
        ),
    ],
)
def test_cli(args: list[str], line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["themisto", *args])
    with pytest.raises(SystemExit) as caught:
        main()
    assert caught.value.code in (1, 2)
    assert one_line(capsys.readouterr().err) == line


def test_difflib_has_few_homes() -> None:
    """A new "did you mean" goes through did_you_mean: difflib is used only there and where several names
    are suggested at once (sample ids, variables), partial names are matched (tools), or an agent repairs a
    prediction with the nearest name the state defines (runtime-state: not an error message)."""
    users = set()
    for folder in ("themisto_env", "agents", "sandbox"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
            if "difflib" in names:
                users.add(str(path.relative_to(ROOT)))
    assert users == {
        "themisto_env/errors.py",
        "themisto_env/env/actions.py",
        "themisto_env/env/tools/_run.py",
        "themisto_env/data/samples.py",
        "themisto_env/replay/dataset.py",
        "sandbox/kernel/helper/_namespace.py",
        "agents/runtime_repair.py",
    }
