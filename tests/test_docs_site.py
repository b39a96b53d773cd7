"""The docstrings render: no Sphinx role in the sources, none on the built site, cross-references that link.

mkdocstrings reads Markdown and its own cross-references (``[`Kernel`][themisto_env.sandbox.Kernel]``); a Sphinx
role (``:class:`Kernel```) shows on the site as raw text. ``scripts/docstring_roles.py`` rewrites roles; the
fast tests here catch a new one in a docstring or a comment without building the site, the slow one builds it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest

REPO = next(folder for folder in Path(__file__).resolve().parents if (folder / "pyproject.toml").exists())


def _converter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docstring_roles", REPO / "scripts" / "docstring_roles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


roles = _converter()

SAMPLE = '''"""See :class:`~themisto_env.env.ThemistoEnv` and :py:func:`score <themisto_env.scoring.score_sample>`."""

MESSAGE = "a :class:`Kernel` in a message is the program's text, not a docstring"


class Probe:
    """Uses :meth:`run`, :attr:`size` and :class:`pandas.DataFrame`."""

    def run(self) -> None:
        """Runs."""
        x = 1  # a comment naming :func:`run`
'''


def test_the_scanner_finds_roles_in_docstrings_and_comments_not_in_other_strings() -> None:
    found = roles.docstring_and_comment_roles(SAMPLE)
    assert [role for _, role in found] == [
        ":class:`~themisto_env.env.ThemistoEnv`",
        ":py:func:`score <themisto_env.scoring.score_sample>`",
        ":meth:`run`",
        ":attr:`size`",
        ":class:`pandas.DataFrame`",
        ":func:`run`",
    ]
    assert [line for line, _ in found] == [1, 1, 7, 7, 7, 11]
    assert roles.roles_in("``--only-binary=:all:`` and ``a:b`` and `x`") == []


def test_no_docstring_or_comment_holds_a_sphinx_role() -> None:
    """A new ``:class:`` in a docstring fails here, before the site is built (fix: scripts/docstring_roles.py)."""
    left = [
        f"{path.relative_to(REPO)}:{line}: {role}"
        for path in roles.files(roles.FOLDERS)
        for line, role in roles.docstring_and_comment_roles(path.read_text())
    ]
    assert len(list(roles.files(["themisto_env", "sandbox", "agents"]))) > 150, "the package's files are scanned"
    assert not left, "Sphinx roles render raw; run python3 scripts/docstring_roles.py:\n" + "\n".join(left)


@pytest.fixture(scope="module")
def collection() -> object:
    """The package as mkdocstrings reads it (griffe: the docs extra)."""
    pytest.importorskip("griffe")
    return roles.load_collection()


def test_the_converter_links_what_the_site_shows_and_leaves_the_rest_as_code(collection: object) -> None:
    """Run over a sample module of themisto_env.env: links to shown objects, code for the rest, code unchanged."""
    shown = {
        "themisto_env.env.ThemistoEnv": "themisto_env.env.ThemistoEnv",
        "themisto_env.env.core.ThemistoEnv": "themisto_env.env.ThemistoEnv",  # an alias: where it is defined
        "themisto_env.ThemistoEnv": "themisto_env.ThemistoEnv",
        "themisto_env.scoring.score_sample": "themisto_env.scoring.score_sample",
    }
    site = roles.Site(collection, shown)
    log = roles.Log()
    path = REPO / "themisto_env" / "env" / "probe.py"  # named, never written
    new = roles.rewrite_source(SAMPLE, path, site, log)
    assert new.splitlines()[0] == (
        '"""See [`ThemistoEnv`][themisto_env.env.ThemistoEnv] and [`score`][themisto_env.scoring.score_sample]."""'
    ), "the nearest face is linked, with Sphinx's title"
    assert '"""Uses `run`, `size` and `pandas.DataFrame`."""' in new, "not on the site: code"
    assert "# a comment naming `run`" in new, "a comment gets code, not a link"
    assert "a :class:`Kernel` in a message" in new, "a string that is not a docstring is left as it is"
    assert log.left == ["themisto_env/env/probe.py:3: :class:`Kernel`"]
    assert roles.rewrite_source(new, path, site, roles.Log()) == new, "a second run changes nothing"


def test_a_rewritten_line_is_wrapped_inside_its_docstring(collection: object) -> None:
    site = roles.Site(collection, {"themisto_env.env.ThemistoEnv": "themisto_env.env.ThemistoEnv"})
    words = " ".join(["word"] * 18)
    source = (
        f'def f() -> None:\n    """Summary {words} :class:`~themisto_env.env.ThemistoEnv` x.\n\n'
        f"    Args:\n        a: {words} :class:`~themisto_env.env.ThemistoEnv` and the rest.\n"
        f'        b: Other.\n    """\n    return None\n'
    )
    new = roles.rewrite_source(source, REPO / "themisto_env" / "probe.py", site, roles.Log())
    assert max(len(line) for line in new.splitlines()) <= roles.LINE_LENGTH
    assert "        b: Other." in new and new.endswith('    """\n    return None\n'), new
    lines = new.splitlines()
    item = next(index for index, line in enumerate(lines) if line.startswith("        a: "))
    assert lines[item + 1].startswith("            "), "an item's continuation is indented under it"


class _Text(HTMLParser):
    """The text of a page outside code, pre, script and style."""

    SKIP = frozenset({"code", "pre", "script", "style"})

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.depth += tag in self.SKIP

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag in self.SKIP

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)


RAW_ROLE = r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|type):"
"""How a role shows on a page: its name as text, its target as code beside it (``:class:<code>Kernel</code>``)."""


@pytest.mark.slow
def test_the_built_site_shows_no_raw_role_and_its_cross_references_link(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (an unresolved cross-reference fails it), then, in every page's text outside
    code: no Sphinx role (``:class:``) and no reference left unresolved (``][name]``); the env's page links."""
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Could not find cross-reference target" not in done.stderr
    raw, unresolved = [], []
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        parser = _Text()
        parser.feed(page.read_text())
        text = "".join(parser.parts)
        raw += [f"{page.relative_to(site)}: {m}" for m in re.findall(RAW_ROLE, text)]
        unresolved += [f"{page.relative_to(site)}: {m}" for m in re.findall(r"\]\[[\w.]*\]", text)]
    assert len(pages) > 20
    assert not raw, "Sphinx roles shown raw:\n" + "\n".join(raw[:50])
    assert not unresolved, "references left unresolved:\n" + "\n".join(unresolved[:50])
    env_page = (site / "reference" / "env" / "index.html").read_text()
    links = re.findall(r'<a class="autorefs autorefs-(?:internal|external)"[^>]*href="([^"]+)"', env_page)
    assert any(href.endswith("#themisto_env.env.EnvConfig") for href in links), "docstrings link other objects"


def test_a_target_written_before_the_sandbox_moved_names_its_new_room() -> None:
    assert roles.moved("themisto_env.sandbox.kernel_contract.KernelLike") == (
        "themisto_env.sandbox.kernel.contract.KernelLike"
    )
    assert roles.moved("themisto_env.sandbox.image_spec") == "themisto_env.sandbox.image.spec"
    assert (
        roles.moved("themisto_env.sandbox.kernel.Kernel.execute") == "themisto_env.sandbox.kernel.core.Kernel.execute"
    )
    assert roles.moved("themisto_env.sandbox.models.SandboxLimits") == "themisto_env.sandbox.models.SandboxLimits"
    assert roles.moved("themisto_env.env.core.ThemistoEnv") == "themisto_env.env.core.ThemistoEnv"
