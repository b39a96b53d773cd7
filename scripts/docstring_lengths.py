"""List the library's module docstrings of 20 lines or more, longest first, with their lengths.

A module docstring says in a few lines what the module is for; measurements belong in
benchmarks/README.md, history in git, usage in docs/. ``tests/test_prose.py`` keeps the count of long ones
from growing. Usage: ``python3 scripts/docstring_lengths.py [--min LINES]``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("themisto_env", "sandbox", "agents")
"""The library's folders (``agents/`` and ``sandbox/`` install as ``themisto_env.agents`` and ``.sandbox``)."""
LONG = 20
"""A module docstring of this many lines or more is long."""


def docstring_lines(path: Path) -> int:
    """The number of source lines the module docstring of ``path`` spans (0 without one)."""
    module = ast.parse(path.read_text(encoding="utf-8"))
    first = module.body[0] if module.body else None
    if not isinstance(first, ast.Expr) or not isinstance(first.value, ast.Constant):
        return 0
    if not isinstance(first.value.value, str):
        return 0
    return (first.end_lineno or first.lineno) - first.lineno + 1


def long_docstrings(minimum: int = LONG) -> dict[str, int]:
    """Every library module whose docstring spans ``minimum`` lines or more: path from the repository -> lines."""
    found = {}
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            lines = docstring_lines(path)
            if lines >= minimum:
                found[str(path.relative_to(REPO))] = lines
    return dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=int, default=LONG, help=f"shortest length to list (default {LONG})")
    args = parser.parse_args(argv)
    found = long_docstrings(args.min)
    for path, lines in found.items():
        print(f"{lines:4d}  {path}")
    print(f"{len(found)} module docstrings of {args.min} lines or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
