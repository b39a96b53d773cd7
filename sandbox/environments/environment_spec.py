"""Kernel environments' specs and records: what an environment holds (its id is the hash) and what was made.

A spec is a Python version, normalised requirement lines and Debian packages; `KERNEL_NEEDS` go
into the hash too. A record is what ``kernel-env create`` made of it on this machine (``<id>/environment.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.errors import ConfigError
from themisto_env.sandbox.environments.location import environment_dir
from themisto_env.sandbox.store.snapshot_store import DEFAULT_ENVIRONMENT

#: What the kernel side of themisto needs in every environment (ipykernel brings IPython, which the
#: in-kernel helper imports; dill writes and loads snapshots). Unpinned: pip picks versions compatible
#: with the user's requirements, and a user's own pin of either wins.
KERNEL_NEEDS: tuple[str, ...] = ("ipykernel", "dill")
#: Bump when the way an environment is made changes (a new id for the same requirements).
SPEC_VERSION = "1"
REGISTRY = "registry.json"
RECORD = "environment.json"
DATASETS = "datasets.txt"
#: Beside a dataset's manifest: the requirements of the environment it was replayed in.
REQUIREMENTS_FILE = "environment-requirements.txt"
ENVIRONMENT_ID = re.compile(r"^[0-9a-f]{12}$")
"""An environment's id: 12 hexadecimal digits."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


class KernelEnvironmentSpec(BaseModel):
    """What an environment holds; its hash is the environment's id.

    Attributes:
        python: ``X.Y``.
        requirements: Normalised requirement lines (pip syntax), sorted.
        apt: Debian packages, sorted.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str = Field(pattern=r"^\d+\.\d+$")
    requirements: list[str] = Field(default_factory=list)
    apt: list[str] = Field(default_factory=list)

    @property
    def id(self) -> str:
        """12 hexadecimal digits of the hash of the spec and of `KERNEL_NEEDS`."""
        payload = json.dumps(
            {"v": SPEC_VERSION, "kernel": KERNEL_NEEDS, **self.model_dump()}, sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def requirements_txt(self) -> str:
        """The requirements as a file (what ``kernel-env create --requirements`` reads back to the same id)."""
        return "".join(f"{line}\n" for line in self.requirements)


class KernelEnvironmentRecord(BaseModel):
    """An environment on this machine (``<id>/environment.json``).

    Attributes:
        id: The spec's id.
        spec: What was asked for.
        created: When it was made (UTC, ISO 8601).
        python_version: The venv's exact Python version.
        packages: Every distribution installed in the venv, with its version (``pip freeze``).
        size_bytes: Size of the venv.
        build_seconds: How long making the venv took.
        image: The docker image, once built.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    spec: KernelEnvironmentSpec
    created: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    python_version: str = ""
    packages: dict[str, str] = Field(default_factory=dict)
    size_bytes: int = 0
    build_seconds: float = 0.0
    image: str | None = None

    @property
    def folder(self) -> Path:
        """The environment's folder."""
        return environment_dir(self.id)

    @property
    def python(self) -> Path:
        """The venv's Python."""
        return self.folder / "venv" / "bin" / "python"


def check_name(name: str) -> None:
    """Refuse a name an environment cannot have.

    Raises:
        ConfigError: Not letters, digits, '.', '_', '-'; or 12 hex digits (an id); or ``default``.
    """
    if not _NAME.match(name) or ENVIRONMENT_ID.match(name) or name == DEFAULT_ENVIRONMENT:
        raise ConfigError(
            f"bad environment name {name!r}: letters, digits, '.', '_', '-' (not 12 hex digits, not 'default')"
        )


def normalise_requirements(text: str, *, source: str = "requirements") -> list[str]:
    """Requirement lines without comments, blank lines and spacing differences, names canonical, sorted.

    Raises:
        ConfigError: A line is not a requirement (pip options such as ``-r`` or ``--index-url`` are not
            taken: the environment must be reproducible from its lines alone).
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    lines: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        if line.startswith("-"):
            raise ConfigError(f"{source}, line {number}: pip options ({line.split()[0]}) are not taken; list packages")
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            reason = str(exc).splitlines()[0] if str(exc) else "malformed"
            raise ConfigError(f"{source}, line {number}: not a requirement: {line!r} ({reason})") from None
        req.name = canonicalize_name(req.name)
        key = f"{req.name}[{','.join(sorted(req.extras))}];{req.marker}"
        lines[key] = str(req)
    return sorted(lines.values())


def make_spec(
    requirements: str | Path | None = None, *, apt: list[str] | None = None, python: str | None = None
) -> KernelEnvironmentSpec:
    """The spec of a requirements file (or text), Debian packages and a Python version (default: this one).

    Raises:
        ConfigError: The file is unreadable or malformed, or a package or version is not well-formed.
    """
    text, source = "", "requirements"
    if isinstance(requirements, Path):
        try:
            text, source = requirements.read_text(), str(requirements)
        except OSError as exc:
            raise ConfigError(f"cannot read the requirements file {requirements}: {exc.strerror}") from None
    elif requirements is not None:
        text = requirements
    bad = [p for p in apt or [] if not _APT.match(p)]
    if bad:
        raise ConfigError(f"not a Debian package name: {', '.join(bad)}")
    version = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    if not re.match(r"^\d+\.\d+$", version):
        raise ConfigError(f"give the Python version as X.Y (e.g. 3.11), got {version!r}")
    return KernelEnvironmentSpec(
        python=version, requirements=normalise_requirements(text, source=source), apt=sorted(set(apt or []))
    )


def available_pythons() -> dict[str, str]:
    """The Pythons on this machine that can make a venv: ``X.Y`` -> executable (this one, those on
    ``PATH`` as ``pythonX.Y``, and pyenv's)."""
    found = {f"{sys.version_info.major}.{sys.version_info.minor}": sys.executable}
    candidates = [shutil.which(f"python3.{minor}") for minor in range(6, 16)]
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += [str(p) for p in sorted(root.glob("*/bin/python3.*")) if re.search(r"python3\.\d+$", p.name)]
    for path in candidates:
        if not path:
            continue
        version = re.search(r"(\d+\.\d+)$", path)
        if version is None or version.group(1) in found:
            continue
        probe = subprocess.run(
            [path, "-c", "import sys, venv, ensurepip; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version.group(1):
            found[version.group(1)] = path
    return dict(sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split(".")))))


def find_python(version: str) -> str:
    """The executable of Python ``X.Y`` on this machine.

    Raises:
        ConfigError: It is not here (the message lists those that are).
    """
    pythons = available_pythons() if version != f"{sys.version_info.major}.{sys.version_info.minor}" else {}
    if not pythons:
        return sys.executable
    if version not in pythons:
        raise ConfigError(
            f"no Python {version} on this machine (available: {', '.join(pythons)}); install it "
            f"(e.g. `apt-get install python{version}` where Debian has it) or pick one of those"
        )
    return pythons[version]


__all__ = [
    "DATASETS",
    "ENVIRONMENT_ID",
    "KERNEL_NEEDS",
    "RECORD",
    "REGISTRY",
    "REQUIREMENTS_FILE",
    "SPEC_VERSION",
    "KernelEnvironmentRecord",
    "KernelEnvironmentSpec",
    "available_pythons",
    "check_name",
    "find_python",
    "make_spec",
    "normalise_requirements",
]
