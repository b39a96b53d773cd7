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
from themisto_env.errors import ConfigError


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


@pytest.mark.parametrize(("command", "extras"), [("run", ["ray", "trace"]), ("data build", ["ray", "trace"])])
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


def test_run_takes_the_env_and_kernel_options_serve_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--tool-budget`` over the config's ``env:``, ``-K`` over its ``kernel:`` block; rarer options are the
    config file's."""
    seen: dict[str, Any] = {}

    def fake_run(config: Any, out: Path, force: bool = False) -> dict[str, Any]:
        seen["env"], seen["backend"] = config.env, config.backend
        raise SystemExit(0)

    monkeypatch.setattr("themisto_env.run.runner.run", fake_run)
    config = tmp_path / "run.yaml"
    config.write_text("env:\n  tool_budget: 9\n  history_length: 4\nkernel:\n  backend: bwrap\n  warm_kernels: 2\n")
    options = ["--tool-budget", "2", "-K", "fork=false", "--kernel", "limits.timeout_s=120"]
    CliRunner().invoke(app, ["run", "--config", str(config), *options])
    kernel = {"warm_kernels": 2, "fork": False, "limits": {"timeout_s": 120}}
    assert seen == {"env": {"tool_budget": 2, "history_length": 4, "kernel": kernel}, "backend": "bwrap"}
    for command in ("run", "serve", "mcp"):
        shown = _help(command)
        assert "--tool-budget" in shown and "--kernel -K" in shown
        # run takes the rare task options in its config file; serve and mcp have none, so they take --tool-cost
        assert ("--tool-cost" in shown) == (command != "run"), command


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["-K", "frok=false"], "env.kernel.frok: no such option; did you mean 'fork'?"),
        (["-K", "backend=docker"], "give the backend with --backend, not -K backend=..."),
        (["-K", "fork"], "-K takes key=value (e.g. -K fork=false), got 'fork'"),
    ],
)
def test_a_bad_kernel_option_is_one_line(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, ["run", *args])  # the ConfigError that `themisto` prints as its one line
    assert isinstance(result.exception, ConfigError) and line in str(result.exception)
    assert "\n" not in str(result.exception)


def test_the_kernel_options_have_a_panel_of_their_own() -> None:
    import typer.rich_utils

    width, typer.rich_utils.MAX_WIDTH = typer.rich_utils.MAX_WIDTH, 400
    try:
        shown = CliRunner().invoke(app, ["run", "--help"]).output
    finally:
        typer.rich_utils.MAX_WIDTH = width
    kernel = shown[shown.index("─ Kernel ─") :]
    for option in ("--backend", "--kernel", "--workers", "--ray"):  # each option's own line, in the panel only
        assert f"│ {option} " in kernel and f"│ {option} " not in shown[: shown.index("─ Kernel ─")]
    assert "─ Model ─" in shown and "--samples" not in shown


def test_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def fake_run(config: Any, out: Path, force: bool = False) -> dict[str, Any]:
        seen.append(config.attempts)
        raise SystemExit(0)

    monkeypatch.setattr("themisto_env.run.runner.run", fake_run)
    CliRunner().invoke(app, ["run", "--attempts", "3"])
    assert seen == [3]
