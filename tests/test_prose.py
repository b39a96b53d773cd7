"""Concise prose: at most `MOST` of the library's module docstrings are `LONG` lines or more (the ratchet).

``scripts/docstring_lengths.py`` lists them. A module docstring says in a few lines what the module is for;
measurements go to benchmarks/README.md, history to git, usage to docs/. `PENDING` names the long ones in
modules their owners rewrite in parallel (issue 46): they are not counted yet, and the list only shrinks.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def _lengths() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docstring_lengths", REPO / "scripts" / "docstring_lengths.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lengths = _lengths()
#: The most module docstrings of `LONG` lines or more.
MOST = 10
LONG = lengths.LONG
#: Long module docstrings in modules rewritten in parallel by their owners; take each off once it is short.
PENDING: set[str] = set()


def test_at_most_ten_module_docstrings_are_long() -> None:
    long = {path: lines for path, lines in lengths.long_docstrings().items() if path not in PENDING}
    assert len(long) <= MOST, (
        f"{len(long)} module docstrings of {LONG} lines or more (at most {MOST}): say in a few lines what the "
        f"module is for; measurements go to benchmarks/README.md, usage to docs/: {long}"
    )


def test_the_pending_list_only_shrinks() -> None:
    """A pending module whose docstring is short now (or that is gone) is taken off the list."""
    stale = PENDING - set(lengths.long_docstrings())
    assert not stale, f"no longer {LONG} lines or more: take {sorted(stale)} off PENDING"


def test_the_count_measures_the_module_docstring(tmp_path: Path) -> None:
    """Lines are the docstring's source lines, quotes included; a module without one counts 0."""
    module = tmp_path / "m.py"
    module.write_text('"""Title.\n\nBody.\n"""\n\nX = """not a docstring\n\n\n"""\n', encoding="utf-8")
    assert lengths.docstring_lines(module) == 4
    module.write_text('X = 1\n"""a string, not a docstring"""\n', encoding="utf-8")
    assert lengths.docstring_lines(module) == 0


def test_the_count_sees_every_folder() -> None:
    """The walk reaches each library folder (a count over nothing passes anything)."""
    every = lengths.long_docstrings(minimum=1)
    for folder in lengths.FOLDERS:
        assert any(path.startswith(f"{folder}/") for path in every), folder
    assert "themisto_env/data/agreement.py" in every
