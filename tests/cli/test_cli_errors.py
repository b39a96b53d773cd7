"""Every CLI error in CLI terms: one line naming the option, the file or the key (issue 22)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from themisto_env.errors import ConfigError
from themisto_env.run.config import load_run_config


def test_a_typo_under_env_names_the_file_and_the_nearest_option(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("agent: repeat-previous\nenv:\n  histroy_length: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_run_config(config)
    assert str(caught.value) == f"{config}: env.histroy_length: no such option; did you mean 'history_length'?"
    config.write_text("env:\n  tool_budget: many\n")
    with pytest.raises(ConfigError, match=r"run.yaml: env.tool_budget: .*integer.*\(got 'many'\)"):
        load_run_config(config)


def test_a_missing_model_speaks_of_the_model_option() -> None:
    from themisto_env.agents.registry import make_agent

    with pytest.raises(ConfigError, match="--model PROVIDER/NAME"):
        make_agent("llm-static")


def test_inspect_task_options_are_one_line_not_a_traceback(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai._util.error import PrerequisiteError

    from themisto_env.bridges.inspect_task import themisto

    with pytest.raises(PrerequisiteError) as caught:
        themisto(task="outptu")  # type: ignore[arg-type]
    assert (
        caught.value.message
        == "themisto task: -T task: 'outptu' is not one of next-cell, output; did you mean 'output'?"
    )
    with pytest.raises(PrerequisiteError, match="no dataset folder here"):
        themisto(data=str(tmp_path / "nowhere"))
    command = [sys.executable, "-m", "inspect_ai", "eval", "themisto_env/themisto", "-T", "task=outptu"]
    done = subprocess.run(
        [*command, "--model", "mockllm/model", "--log-dir", str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},  # inspect wraps its message at the terminal's width
        timeout=300,
    )
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode != 0 and output == [
        "themisto task: -T task: 'outptu' is not one of next-cell, output; did you mean 'output'?"
    ]


def test_view_open_on_a_headless_machine_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    from themisto_env.commands.results import open_in_browser

    tried: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: tried.append(url) or False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    note = open_in_browser(tmp_path / "view.html")
    assert note is not None and note.startswith("--open: no display here (a headless machine)")
    assert f"python3 -m http.server -d {tmp_path}" in note and not tried  # no text browser in this terminal
    monkeypatch.setenv("DISPLAY", ":0")
    assert open_in_browser(tmp_path / "view.html").startswith("--open: no browser found")  # type: ignore[union-attr]
    assert tried == [(tmp_path / "view.html").resolve().as_uri()]
