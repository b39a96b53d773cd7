"""Which upper bounds of pyproject.toml's dependencies the installed versions pass: the newest-versions lane's
report of what it runs past.

    python scripts/bounds_passed.py ipykernel ipython        one line per package past its bound, then a summary

A line reads ``ipykernel 7.5.0 is past <7.5``. Exits 0 whatever it finds (a report, not a gate).
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def passed(names: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    """For each of ``names`` (all the dependencies when empty) whose installed version its pyproject.toml
    specifier rejects: ``name version is past specifier``."""
    requirements = [Requirement(line) for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    wanted = {canonicalize_name(name) for name in names}
    found = []
    for requirement in requirements:
        if wanted and canonicalize_name(requirement.name) not in wanted:
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            bounds = [str(spec) for spec in requirement.specifier if spec.operator in ("<", "<=")]
            upper = ",".join(bounds) or str(requirement.specifier)
            found.append(f"{requirement.name} {installed} is past {upper}")
    return found


def main() -> None:
    lines = passed(sys.argv[1:])
    print("\n".join(lines) if lines else "no bound passed: every version installed is within pyproject.toml's")


if __name__ == "__main__":
    main()
