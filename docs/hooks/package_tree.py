"""mkdocs hook: the import layout the API reference reads, as Python sees it installed.

``pyproject.toml`` installs the folders ``agents/`` and ``sandbox/`` as ``themisto_env.agents`` and
``themisto_env.sandbox`` (``package-dir``). mkdocstrings reads the source without importing it and looks for
subpackages inside ``themisto_env/``, so this hook lays out, in a temporary folder, a ``themisto_env`` whose
entries link to the real files (the two folders included) and points the python handler at it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

REPO = Path(__file__).resolve().parents[2]
MAPPED = {"agents": REPO / "agents", "sandbox": REPO / "sandbox"}
"""Subpackages installed from folders outside ``themisto_env/`` (``[tool.setuptools] package-dir``)."""


def package_tree() -> Path:
    """A temporary folder holding ``themisto_env/``: links to each real entry and to the mapped folders."""
    root = Path(tempfile.mkdtemp(prefix="themisto-docs-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    package = root / "themisto_env"
    package.mkdir()
    for entry in (REPO / "themisto_env").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        (package / name).symlink_to(folder)
    return root


@event_priority(100)  # before mkdocstrings reads its handlers' configuration
def on_config(config: Any) -> Any:
    handlers = config.plugins["mkdocstrings"].config["handlers"]
    python = handlers.setdefault("python", {})
    python["paths"] = [str(package_tree())]
    return config
