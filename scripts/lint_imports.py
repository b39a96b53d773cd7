"""Check the import contracts of pyproject.toml (``[tool.importlinter]``) with import-linter.

``themisto_env.agents`` and ``themisto_env.sandbox`` live in the top-level folders ``agents/`` and
``sandbox/`` (setuptools ``package-dir`` mapping), which grimp (import-linter's graph builder) cannot
follow: it walks the root package's folder. This script lays the installed shape out as symlinks in a
temporary folder (``themisto_env/`` holding the library's files plus ``agents`` and ``sandbox``) and runs
``lint-imports`` there against the repository's pyproject.toml. Nothing in the repository is touched.

Usage: ``python3 scripts/lint_imports.py [lint-imports options]``; the exit status is lint-imports' own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAPPED_PACKAGES = {"agents": REPO / "agents", "sandbox": REPO / "sandbox"}


def stage_package(into: Path) -> Path:
    """Lay ``themisto_env`` out as installed (symlinks) under ``into`` and return its folder.

    Args:
        into: An empty folder to build the package in.

    Returns:
        The staged ``themisto_env`` folder.
    """
    package = into / "themisto_env"
    package.mkdir()
    for entry in (REPO / "themisto_env").iterdir():
        if entry.name != "__pycache__" and entry.name not in MAPPED_PACKAGES:
            (package / entry.name).symlink_to(entry)
    for name, source in MAPPED_PACKAGES.items():
        (package / name).symlink_to(source)
    return package


def main(argv: list[str]) -> int:
    """Run lint-imports over the staged package.

    Args:
        argv: Extra lint-imports options (for example ``--verbose``).

    Returns:
        lint-imports' exit status (0 when every contract is kept).
    """
    with tempfile.TemporaryDirectory(prefix="themisto-lint-imports-") as folder:
        stage_package(Path(folder))
        env = {**os.environ, "PYTHONPATH": folder}
        command = [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
            str(REPO / "pyproject.toml"),
            "--no-cache",
            "--no-logo",
            *argv,
        ]
        return subprocess.run(command, cwd=folder, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
