"""The package versions a recording says it ran with: what a replay's ``environment`` cause is checked against.

A source can say which versions it ran with in two places, both optional:

* a requirements file beside it (``requirements.txt`` in the notebook's folder, or in the session's working
  folder for a JuNE log): its exactly pinned lines (``pandas==1.5.3``); other lines are ignored;
* a notebook's metadata: a ``packages`` mapping (name -> version), at the top level of the metadata or under
  ``themisto`` (what `themisto_env.data.recorder` can write).

The metadata wins over the file for a package both name. Names are compared as pip does (case and ``-``/``_``
/``.`` folded).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

REQUIREMENTS = "requirements.txt"
_PINNED = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;#]+)")


def canonical_name(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_versions(text: str) -> dict[str, str]:
    """The exactly pinned packages of a requirements file's text: name -> version."""
    found = {}
    for line in text.splitlines():
        if match := _PINNED.match(line):
            found[canonical_name(match[1])] = match[2]
    return found


def _metadata_versions(notebook: Path) -> dict[str, str]:
    try:
        metadata = json.loads(notebook.read_text(encoding="utf-8")).get("metadata") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    packages = metadata.get("packages") or (metadata.get("themisto") or {}).get("packages") or {}
    if not isinstance(packages, dict):
        return {}
    return {canonical_name(str(k)): str(v) for k, v in packages.items() if isinstance(v, (str, int, float))}


def recorded_versions(source_path: str | Path | None, folder: str | Path | None) -> dict[str, str]:
    """What a source recorded of its package versions (see the module doc); empty when it says nothing.

    Args:
        source_path: The notebook or log the session was read from.
        folder: The folder its kernel ran in (a notebook's own, or ``--workdir``), if any.
    """
    versions: dict[str, str] = {}
    for where in dict.fromkeys(p for p in (folder, Path(source_path).parent if source_path else None) if p):
        requirements = Path(where) / REQUIREMENTS
        if requirements.is_file():
            with contextlib.suppress(OSError):
                versions.update(pinned_versions(requirements.read_text(encoding="utf-8", errors="replace")))
    if source_path is not None and str(source_path).endswith(".ipynb"):
        versions.update(_metadata_versions(Path(source_path)))
    return versions


def version_drift(recorded: dict[str, str], installed: dict[str, str]) -> dict[str, list[str]]:
    """The packages whose installed version differs from the recorded one: name -> [recorded, installed]."""
    drift = {}
    for name, version in recorded.items():
        have = installed.get(name, "absent")
        if have != version:
            drift[name] = [version, have]
    return dict(sorted(drift.items()))


__all__ = ["REQUIREMENTS", "canonical_name", "pinned_versions", "recorded_versions", "version_drift"]
