"""The README's two commands are CI's, the README is short and links stay in the repository, and the site builds
strictly with every command in its CLI reference. Every example of the README and docs/ runs in
tests/test_docs_examples.py."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

#: The commands run in reading order, each depending on those before it, each a CLI process: end to end.
pytestmark = pytest.mark.slow

REPO = next(folder for folder in Path(__file__).resolve().parents if (folder / "pyproject.toml").exists())
DOCS = REPO / "docs"


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def documented_pages() -> list[Path]:
    """README.md, then the site's pages in the order of mkdocs.yml's nav (then any page the nav leaves out)."""
    nav = [DOCS / page for page in _nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])]
    rest = sorted(set(DOCS.rglob("*.md")) - set(nav))
    return [REPO / "README.md", *nav, *rest]


PAGES = {str(page.relative_to(REPO)): page.read_text() for page in documented_pages()}
README = PAGES["README.md"]


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


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


def test_the_readme_is_short_and_every_link_stays_in_the_repository() -> None:
    """The README is what a newcomer reads first (at most 250 lines); the rest is in docs/. Neither sends a
    reader outside the repository for what the code is: every relative link names a file of the repository."""
    assert len(README.splitlines()) <= 250
    for page, text in PAGES.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = ((REPO / page).parent / target.split("#", 1)[0]).resolve()
            assert path.is_relative_to(REPO) and path.exists(), f"{page} links to {target}, not a file of the repo"


def test_ci_builds_the_docs_strictly_between_the_lint_and_the_tests() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    build = re.search(r"^.*mkdocs build --strict.*$", ci, flags=re.M)
    assert build and "--site-dir" in build.group(0), "CI builds the site into a folder outside the repository"
    assert ci.index("scripts/lint_imports.py") < build.start() < ci.index("python3 -m pytest")


def test_the_site_builds_strictly_with_every_command_in_its_cli_reference(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (a broken link, a page left out of the nav, a docstring mkdocstrings cannot
    read fail it); the CLI reference page, written at build time, has a section for every command."""
    import typer.main

    from themisto_env.cli import app

    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cli_page = (site / "cli" / "index.html").read_text()
    top = typer.main.get_command(app)
    context = top.context_class(top, info_name="themisto")
    for name in top.list_commands(context):
        command = top.get_command(context, name)
        subcommands = getattr(command, "list_commands", lambda _context: [])(context)
        for path in [f"themisto {name}", *(f"themisto {name} {sub}" for sub in subcommands)]:
            assert f"<code>{path}</code>" in cli_page, f"the CLI reference lacks {path}"
    assert "--max-sessions" in cli_page and "--kernel-env" in cli_page, "options are listed"
    for page in sorted((DOCS / "reference").glob("*.md")):
        shown = re.search(r"^::: (\S+)$", page.read_text(), flags=re.M)
        if shown is None:
            continue
        package = importlib.import_module(shown.group(1))  # a package's face lists its names without importing them
        html = (site / "reference" / page.stem / "index.html").read_text()
        names = list(getattr(package, "__all__", []))
        documented = [name for name in names if f'id="{package.__name__}.{name}"' in html]
        assert len(documented) >= len(names) / 2, f"{page.name} shows {documented} of {package.__name__}'s {names}"
    api_page = (site / "reference" / "env" / "index.html").read_text()
    assert 'id="themisto_env.env.ThemistoEnv"' in api_page, "the API reference is written from the code"
