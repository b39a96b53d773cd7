"""Modules of a few hundred lines: none of the package's (``themisto_env/``, ``sandbox/``, ``agents/``) is over
`LIMIT` lines, except those `OVER_LIMIT` names with the reason, and that list only shrinks: an entry whose
module is gone or back under the limit fails until it is taken off.

A module that grows past the limit is split into modules named for what they hold (the in-kernel programs
too: their parts are joined into the one source a kernel gets, see ``themisto_env.sandbox.kernel.sources``).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The package's folders (``agents/`` and ``sandbox/`` are installed as ``themisto_env.agents`` and ``.sandbox``).
FOLDERS = ("themisto_env", "sandbox", "agents")
#: The most lines a module may have.
LIMIT = 500
#: Today's modules over the limit, by path, and why. Only ever remove entries.
OVER_LIMIT = {}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _modules() -> dict[str, int]:
    """Every module of the package, by path from the repository, with its number of lines."""
    return {
        str(path.relative_to(REPO)): _lines(path)
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def test_no_module_is_over_the_limit_but_the_listed_ones() -> None:
    over = {path: lines for path, lines in _modules().items() if lines > LIMIT and path not in OVER_LIMIT}
    assert not over, f"modules over {LIMIT} lines (split them into modules named for what they hold): {over}"


def test_the_list_of_exceptions_only_shrinks() -> None:
    """An exception whose module is gone or no longer over the limit is taken off the list."""
    modules = _modules()
    stale = {path for path in OVER_LIMIT if modules.get(path, 0) <= LIMIT}
    assert not stale, f"no longer over {LIMIT} lines: take {sorted(stale)} off OVER_LIMIT"


def test_the_count_sees_every_folder_and_the_in_kernel_parts() -> None:
    """The walk reaches each folder and the in-kernel programs' parts (a count over nothing passes anything)."""
    modules = _modules()
    for folder in FOLDERS:
        assert any(path.startswith(f"{folder}/") for path in modules), folder
    assert "sandbox/kernel/helper/_fingerprint.py" in modules
    assert "sandbox/template/zygote/_server.py" in modules
