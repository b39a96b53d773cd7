"""Every command in README.md runs, as a newcomer would type it (from a folder beside the repo's files).

Shell lines starting with ``themisto`` are run in README order (compare and report read the runs made
before them) through the installed entry point; ``themisto run`` gets ``--limit 12`` appended so the
suite stays short (the main job's full run is measured in the issue notes, not here).
The Python example is run as a script. ``bash scripts/setup.sh`` is what CI itself runs first.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

#: The commands run in README order, each depending on those before it, each a CLI process: end to end.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def readme_commands() -> list[str]:
    """The themisto commands of the README's bash blocks, in order, comments removed."""
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if "&& themisto" in line:  # `bash scripts/setup.sh && source .venv/bin/activate && themisto ...`
                line = line.rsplit("&&", 1)[1].strip()
            if line.startswith("themisto "):
                commands.append(line)
    return commands


def command_needs(command: str) -> list[pytest.MarkDecorator]:
    """The markers of a README command (see tests/conftest.py): the backend it names, the kernel image it
    builds, the pinned environment it makes or uses."""
    args = shlex.split(command)
    marks = []
    if "--backend" in args and args[args.index("--backend") + 1] in ("docker", "bwrap"):
        marks.append(getattr(pytest.mark, args[args.index("--backend") + 1]))
    if args[1:3] == ["sandbox", "build-image"]:
        marks.append(pytest.mark.docker)
    if args[1] == "kernel-env" or "--kernel-env" in args or "--project-envs" in args:
        marks.append(pytest.mark.environments)
    return marks


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the README's relative paths (configs/, tests/fixtures/) resolve, and outputs land."""
    root = tmp_path_factory.mktemp("readme")
    (root / "configs").symlink_to(REPO / "configs")
    (root / "tests").symlink_to(REPO / "tests")
    return root


def test_the_readme_has_the_two_commands() -> None:
    first = _blocks("bash")[0]
    activate = "source .venv/bin/activate"
    assert f"bash scripts/setup.sh && {activate} && themisto run" in first
    assert f"bash scripts/setup.sh --docker && {activate} && python3 -m pytest" in first
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    line = next(line for line in first.splitlines() if line.startswith("bash scripts/setup.sh --docker && "))
    test_command = line.rsplit(" && ", 1)[1].split(" #", 1)[0]
    assert "bash scripts/setup.sh --docker" in ci and test_command in ci, "CI runs the README's test command, exactly"
    assert ci.index("bash scripts/setup.sh --docker") < ci.index(activate) < ci.index(test_command), (
        "CI sets up, activates the venv and runs the tests in the README's order"
    )
    assert "-n auto" in test_command and "--durations=25" in test_command, "in parallel, naming the slowest tests"
    assert "bash scripts/setup-bwrap-user.sh" in ci, "CI runs the bwrap tests as an unprivileged user"


@pytest.mark.parametrize("command", [pytest.param(c, marks=command_needs(c)) for c in readme_commands()])
def test_readme_command_runs(command: str, workdir: Path) -> None:
    args = shlex.split(command)
    if args[1] == "run":
        args += ["--limit", "12"]
        if "--out" not in args:
            args += ["--out", "runs/latest"]
    done = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=1800, env=dict(os.environ))
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if args[1] == "run":
        out = workdir / args[args.index("--out") + 1]
        assert (out / "results.jsonl").exists() and (out / "summary.json").exists()
        assert "rouge_l" in done.stdout
    if args[1] == "report":
        assert (workdir / args[2] / "report.html").exists()


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_readme_python_block_runs(index: int, workdir: Path) -> None:
    """Complete examples run as scripts; a sketch with ``...`` placeholders (the GRPO trainer, which
    ``examples/train_grpo.py`` runs in full in tests/bridges/rl) must at least import what it names."""
    block = _blocks("python")[index]
    if re.search(r"[=(,]\s*\.\.\.", block):  # an argument left as `...`: a sketch
        block = "\n".join(line for line in block.splitlines() if line.startswith(("import ", "from ")))
    done = subprocess.run([sys.executable, "-c", block], cwd=workdir, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    if index == 0:
        assert "exact_match" in done.stdout
