"""What the command line shows of itself: help texts as written, ``--version``, the agents that need a model,
and the env options ``run`` takes as ``serve`` does (issue 44)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
from rich.text import Text
from typer.testing import CliRunner

from themisto_env._version import __version__
from themisto_env.cli import app


def _help(*args: str) -> str:
    """A command's help as one line (rich wraps it at ``MAX_WIDTH``: wide enough for nothing to wrap)."""
    import typer.rich_utils

    width, typer.rich_utils.MAX_WIDTH = typer.rich_utils.MAX_WIDTH, 400
    try:
        result = CliRunner().invoke(app, [*args, "--help"])
    finally:
        typer.rich_utils.MAX_WIDTH = width
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    ("command", "extras"), [("run", ["ray", "trace"]), ("serve", ["ray"]), ("data build", ["ray", "trace"])]
)
def test_help_keeps_the_extras_brackets(command: str, extras: list[str]) -> None:
    shown = _help(*command.split())
    for extra in extras:
        assert f"themisto-env[{extra}]" in shown


def _params() -> list[tuple[str, str]]:
    top = typer.main.get_command(app)
    found, pending = [], [(top, top.context_class(top, info_name="themisto"))]
    while pending:
        command, context = pending.pop()
        found += [(context.command_path, command.help or "")]
        found += [(f"{context.command_path} {p.name}", getattr(p, "help", None) or "") for p in command.params]
        for name in getattr(command, "list_commands", lambda _c: [])(context):
            sub = command.get_command(context, name)
            pending.append((sub, type(context)(sub, info_name=name, parent=context)))
    return found


def test_no_help_text_is_eaten_by_rich_markup() -> None:
    """Rich reads ``[word]`` as markup and drops it: a bracket shown in help is written ``\\[``."""
    for where, text in _params():
        assert Text.from_markup(text).plain == text.replace("\\[", "["), f"{where}: rich markup eats part of {text!r}"


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"themisto-env {__version__}"


def test_agents_says_which_need_a_model() -> None:
    lines = CliRunner().invoke(app, ["agents"]).output.splitlines()
    marked = {line.split()[0] for line in lines if "[needs --model]" in line and not line.startswith("[")}
    assert marked == {"llm-static", "llm-full", "llm-tools"}
    assert any("--model fake" in line for line in lines)


def test_run_takes_the_env_options_serve_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(config: Any, out: Path, force: bool = False) -> dict[str, Any]:
        seen["env"] = config.env
        raise SystemExit(0)

    monkeypatch.setattr("themisto_env.run.runner.run", fake_run)
    config = tmp_path / "run.yaml"
    config.write_text("env:\n  tool_budget: 9\n  history_length: 4\n  fork: false\n")
    options = ["--tool-budget", "2", "--tool-cost", "0.5", "--history-length", "3"]
    CliRunner().invoke(app, ["run", "--config", str(config), *options])
    assert seen["env"] == {"tool_budget": 2, "tool_cost": 0.5, "history_length": 3, "fork": False}
    for command in ("run", "serve"):
        shown = _help(command)
        assert "--tool-budget" in shown and "--tool-cost" in shown and "--history-length" in shown


def test_attempts_and_its_hidden_deprecated_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def fake_run(config: Any, out: Path, force: bool = False) -> dict[str, Any]:
        seen.append(config.attempts)
        raise SystemExit(0)

    monkeypatch.setattr("themisto_env.run.runner.run", fake_run)
    CliRunner().invoke(app, ["run", "--attempts", "3"])
    old = CliRunner().invoke(app, ["run", "--samples", "2"])
    assert seen == [3, 2] and "--samples is deprecated: it is now --attempts" in old.output
    shown = _help("run")
    assert "--attempts" in shown and "--samples" not in shown
