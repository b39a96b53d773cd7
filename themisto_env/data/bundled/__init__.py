"""Data shipped with themisto-env, so that everything runs offline.

The bundled dataset is a JuNE event log written for this project (see ``scripts/bundled/`` for the
sessions it was generated from and ``scripts/bundled/make_bundled.py`` for how). It is the default data
everywhere.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

BUNDLED_LOG_NAME = "june_log.jsonl"


def bundled_dir() -> Path:
    """The folder holding the bundled data files.

    Returns:
        The folder inside the installed package.
    """
    return Path(str(resources.files("themisto_env.data.bundled")))


def bundled_log_path() -> Path:
    """The bundled JuNE event log (JSON Lines): several development sessions over sklearn's datasets.

    Returns:
        The path of ``june_log.jsonl`` inside the installed package.
    """
    return bundled_dir() / BUNDLED_LOG_NAME


__all__ = ["BUNDLED_LOG_NAME", "bundled_dir", "bundled_log_path"]
