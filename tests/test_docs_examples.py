"""Every example of README.md and docs/*.md runs: each ``python`` block as a script with the venv's Python,
each ``bash`` block (and each ``$ `` line of a ``console`` or ``sh`` block) with bash, in one folder beside the
repo's files (``configs/``, ``tests/``, ``agents/``, ``examples/`` linked in), in reading order (the README,
then mkdocs.yml's nav): ``compare`` reads the runs made before it.

A block that cannot run here says so in its first line, ``# needs: WHY`` (or ``<!-- docs-test: WHY -->`` just
above it): `SKIPS` are shown and skipped with their reason, `MARKS` run in the lane that has them (docker,
bwrap, a kernel environment, TRL). A python block whose first line is ``# NAME.py`` is also written to that
file (a module the next blocks import). A block with an argument left as ``...`` is a sketch: its imports
run. ``themisto run`` gets ``--limit 12`` unless it has a limit, so the suite stays short. LLM blocks run
against a stand-in OpenAI-compatible server (`tests.agents.stand_in`): ``http://localhost:8000/v1`` in a
block is its address.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.agents.stand_in import StandIn

REPO = Path(__file__).resolve().parents[1]
LINKED = ("configs", "tests", "agents", "examples")
LOCAL_SERVER = "http://localhost:8000/v1"

#: ``# needs: NAME``: skipped here, with why.
SKIPS = {
    "ci": "CI runs it itself (.ci/run: scripts/setup.sh, then the whole test suite)",
    "provider-key": "needs a real LLM provider's key and the network",
    "gpu": "needs a GPU",
    "server": "starts a server that runs until stopped (tests/bridges/openenv serves and queries one)",
    "network": "downloads public notebooks or packages and installs them (measured once; the page says so)",
}
#: ``# needs: NAME``: run in the lane with that marker (tests/conftest.py skips it where it cannot run).
MARKS = {"docker": "docker", "bwrap": "bwrap", "environments": "environments", "training": "training", "ray": "ray"}
#: What a block must print (its page and first line): the README's demo must stay real for the bundled data.
EXPECT = {("README.md", "import gymnasium as gym"): ("(178, 13)", "'exact_match': 1.0")}

BLOCK = re.compile(r"(<!-- docs-test: ([\w-]+) -->\s*\n)?```(python|bash|console|sh)\n(.*?)```", re.S)


@dataclass(frozen=True)
class Example:
    """One runnable block of a page."""

    page: str
    line: int
    language: str
    code: str
    needs: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _nav(entries: list) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav(value) if isinstance(value, list) else [value]
    return pages


def pages() -> list[Path]:
    """README.md, then the site's pages in mkdocs.yml's nav order (then any page the nav leaves out)."""
    nav = [REPO / "docs" / page for page in _nav(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])]
    return [REPO / "README.md", *nav, *sorted(set((REPO / "docs").glob("*.md")) - set(nav))]


def examples() -> Iterator[Example]:
    for path in pages():
        text = path.read_text()
        for match in BLOCK.finditer(text):
            code, language = match.group(4), match.group(3)
            first = code.splitlines()[0] if code.strip() else ""
            needs = match.group(2) or (m.group(1) if (m := re.match(r"#\s*needs:\s*([\w-]+)", first)) else None)
            if language in ("console", "sh"):  # shown as typed: the ``$ `` lines are the commands
                lines = [line[2:] for line in code.replace("\\\n", " ").splitlines() if line.startswith("$ ")]
                code = "\n".join(lines) + "\n" if lines else code
            line = text[: match.start(3)].count("\n") + 1
            yield Example(str(path.relative_to(REPO)), line, language, code, needs)


def _param(example: Example) -> object:
    marks: list[pytest.MarkDecorator] = [pytest.mark.slow]
    if example.needs in MARKS:
        marks.append(getattr(pytest.mark, MARKS[example.needs]))
    return pytest.param(example, marks=marks, id=example.id)


EXAMPLES = list(examples())

#: Run every block in one worker, in order (the later blocks read what the earlier ones wrote).
pytestmark = pytest.mark.xdist_group("docs-examples")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs-examples")
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    return root


@pytest.fixture(scope="module")
def server() -> Iterator[StandIn]:
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


SHELL_PRELUDE = """set -euo pipefail
themisto() {  # a documented run, kept short
  if [ "${1:-}" = run ] && [[ " $* " != *" --limit "* ]]; then
    command themisto "$@" --limit 12
  else
    command themisto "$@"
  fi
}
"""


def _run(example: Example, workdir: Path, server: StandIn) -> subprocess.CompletedProcess[str]:
    code = example.code.replace(LOCAL_SERVER, server.base_url)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # a local server needs no key
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if example.language == "python":
        name = re.match(r"#\s*(\w+\.py)\s*$", code.splitlines()[0] if code else "")
        if name:  # a module the next blocks use
            (workdir / name.group(1)).write_text(code)
        if re.search(r"[=(,]\s*\.\.\.", code):  # an argument left as `...`: a sketch, whose imports must work
            code = "\n".join(line for line in code.splitlines() if line.startswith(("import ", "from ")))
        command = [sys.executable, "-c", code]
    else:
        command = ["bash", "-c", SHELL_PRELUDE + code]
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_documented_example_runs(example: Example, workdir: Path, server: StandIn) -> None:
    if example.needs in SKIPS:
        pytest.skip(f"{example.id}: {SKIPS[example.needs]}")
    assert example.needs is None or example.needs in MARKS, f"{example.id}: unknown '# needs: {example.needs}'"
    done = _run(example, workdir, server)
    assert done.returncode == 0, f"{example.id}\n{example.code}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    first = example.code.splitlines()[0] if example.code else ""
    for expected in EXPECT.get((example.page, first), ()):
        assert expected in done.stdout, f"{example.id} no longer prints {expected!r}:\n{done.stdout[-2000:]}"


def test_the_collector_finds_the_blocks() -> None:
    """Every page's runnable blocks are collected, and the skip list stays short and explained."""
    found = {e.page for e in EXAMPLES}
    assert {"README.md", "docs/agents.md", "docs/first-llm-evaluation.md", "docs/environment.md"} <= found
    skipped = [e for e in EXAMPLES if e.needs in SKIPS]
    assert len(skipped) <= len(EXAMPLES) // 3, [e.id for e in skipped]
    assert all(e.needs is None or e.needs in SKIPS or e.needs in MARKS for e in EXAMPLES)


#: The installed package's folders that live elsewhere in the repository (pyproject's package-dir).
INSTALLED_AS = {"themisto_env/agents/": "agents/", "themisto_env/sandbox/": "sandbox/"}
FOLDERS = "themisto_env|agents|sandbox|scripts|examples|configs|tests|benchmarks|docs|requirements"


def test_every_path_a_page_names_exists() -> None:
    """A file or folder named in backticks (``themisto_env/data/bundled/june_log.jsonl``) is in the repository."""
    missing = []
    for path in pages():
        for match in re.finditer(rf"`((?:{FOLDERS})/[\w./-]*)`", path.read_text()):
            named = match.group(1).rstrip(".")
            for installed, folder in INSTALLED_AS.items():
                named = folder + named.removeprefix(installed) if named.startswith(installed) else named
            if not (REPO / named).exists():
                missing.append(f"{path.relative_to(REPO)}: {match.group(1)}")
    assert not missing, missing
