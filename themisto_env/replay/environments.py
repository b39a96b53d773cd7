"""Kernel environments: named, content-addressed package sets that kernels run in (``themisto env``).

``themisto env create NAME --requirements FILE [--apt PKG]... [--python X.Y] [--docker]`` makes one:

* a venv (``python -m venv`` of the requested Python) with the requirements, plus ipykernel and dill
  at versions pip finds compatible with them (the user's pins win; source distributions are built where
  no wheel exists), for the ``local`` and ``bwrap`` backends;
* with ``--docker`` (or when a docker replay first needs it), an image ``themisto-kernel-env:<id>`` with
  the venv's exact versions, built like the kernel image (:mod:`themisto_env.sandbox.image`: a debootstrap
  base, the Debian packages of ``--apt`` included, wheels installed offline).

The environment's id is a hash of its Python version, its normalised requirements, its Debian packages
and what the kernel side of themisto needs (:data:`KERNEL_NEEDS`): creating an identical environment again
is instant, and a changed requirements file under the same name is a new id (the name moves to it; old
datasets keep pointing at theirs). On disk, under ``<cache>/environments``::

    registry.json          name -> id
    <id>/environment.json  the EnvironmentRecord (spec, installed versions, size, build time)
    <id>/venv/             the venv
    <id>/datasets.txt      dataset folders built in it (``env rm`` refuses while one still uses it)

Downloads are cached by pip (under ``$THEMISTO_CACHE/pip`` when ``THEMISTO_CACHE`` is set, else pip's own
cache), and the docker image's wheels under ``<cache>/environments/wheels``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from themisto_env.errors import BackendUnavailableError, ConfigError
from themisto_env.sandbox.environments import (
    DEFAULT_ENVIRONMENT,
    environment_dir,
    environment_image,
    environments_dir,
)

if TYPE_CHECKING:
    from rich.console import Console

    from themisto_env.data.trajectory import EnvironmentRef, Manifest

log = logging.getLogger("themisto_env")

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
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


class EnvironmentSpec(BaseModel):
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
        """12 hexadecimal digits of the hash of the spec and of :data:`KERNEL_NEEDS`."""
        payload = json.dumps(
            {"v": SPEC_VERSION, "kernel": KERNEL_NEEDS, **self.model_dump()}, sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def requirements_txt(self) -> str:
        """The requirements as a file (what ``env create --requirements`` reads back to the same id)."""
        return "".join(f"{line}\n" for line in self.requirements)


class EnvironmentRecord(BaseModel):
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
    spec: EnvironmentSpec
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


# -- specs -----------------------------------------------------------------------------------------------


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
) -> EnvironmentSpec:
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
    return EnvironmentSpec(
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


# -- the registry ----------------------------------------------------------------------------------------


def _registry() -> dict[str, str]:
    path = environments_dir() / REGISTRY
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: the environment registry is unreadable ({exc}); remove it to start over") from None
    return {str(k): str(v) for k, v in data.items()}


def _write_registry(names: dict[str, str]) -> None:
    path = environments_dir() / REGISTRY
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(names.items())), indent=2) + "\n")
    tmp.replace(path)


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """An exclusive lock under the environments folder (two processes making the same env wait)."""
    folder = environments_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_record(env_id: str) -> EnvironmentRecord | None:
    """The record of the environment with this id, or None if it is not on this machine (or incomplete)."""
    path = environment_dir(env_id) / RECORD
    try:
        record = EnvironmentRecord.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        raise ConfigError(f"{path}: unreadable environment record ({exc}); `themisto env rm {env_id}`") from None
    return record if record.python.exists() else None


def _write_record(record: EnvironmentRecord) -> None:
    path = record.folder / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(indent=2) + "\n")
    tmp.replace(path)


def resolve(name_or_id: str) -> EnvironmentRecord:
    """The environment a name (or id) stands for.

    Raises:
        ConfigError: No such environment here (the message lists those there are).
    """
    names = _registry()
    env_id = names.get(name_or_id, name_or_id)
    record = read_record(env_id) if re.match(r"^[0-9a-f]{12}$", env_id) else None
    if record is None:
        known = ", ".join(sorted(names)) or "none"
        raise ConfigError(
            f"no kernel environment {name_or_id!r} here (known: {known}); make it with "
            f"`themisto env create {name_or_id} --requirements FILE`"
        )
    return record


def names_of(env_id: str) -> list[str]:
    """The names that point at an environment."""
    return sorted(n for n, i in _registry().items() if i == env_id)


def list_environments() -> list[EnvironmentRecord]:
    """Every environment on this machine, newest first."""
    folder = environments_dir()
    records = [read_record(p.name) for p in folder.glob("*") if re.match(r"^[0-9a-f]{12}$", p.name)]
    return sorted((r for r in records if r is not None), key=lambda r: r.created, reverse=True)


# -- making one ------------------------------------------------------------------------------------------


def pip_environment() -> dict[str, str]:
    """The environment pip runs with: its cache under ``$THEMISTO_CACHE/pip`` when that is set."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if root := os.environ.get("THEMISTO_CACHE"):
        env.setdefault("PIP_CACHE_DIR", str(Path(root).expanduser() / "pip"))
    return env


def _run(what: str, cmd: list[str], log: Path, console: Console | None) -> None:
    """Run one step with its output in ``log``; a failure is one line with pip's own error and the log."""
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if console is not None:
            stack.enter_context(console.status(f"{what}…"))
        out = stack.enter_context(open(log, "ab"))
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=pip_environment(), check=False)
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR") or "error:" in ln.lower()]
        detail = (errors or lines or ["no output"])[0 if errors else -1].strip()
        detail = re.sub(r"\(from versions: ([^)]*)\)", _few_versions, detail)
        raise ConfigError(f"{what} failed (exit {proc.returncode}): {detail[:400]}; log: {log}")
    if console is not None:
        console.print(f"[green]✓[/] {what} ({time.perf_counter() - started:.1f} s)")


def _few_versions(match: re.Match[str]) -> str:
    """pip's ``(from versions: ...)`` list cut to its ends (it names every release)."""
    versions = [v.strip() for v in match.group(1).split(",")]
    shown = versions if len(versions) <= 6 else [*versions[:3], "...", *versions[-3:]]
    return f"(from versions: {', '.join(shown)})"


def _ensure_apt_on_host(packages: list[str], log: Path, console: Console | None) -> None:
    """Install the Debian packages a local environment names, where they are missing (needs root)."""
    missing = []
    for package in packages:
        probe = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
        )
        if "install ok installed" not in probe.stdout:
            missing.append(package)
    if not missing:
        return
    if os.geteuid() != 0:
        raise ConfigError(f"Debian packages missing here: `sudo apt-get install {' '.join(missing)}`, then again")
    try:
        _run("apt-get install " + " ".join(missing), ["apt-get", "install", "-y", "-q", *missing], log, console)
    except ConfigError:
        _run("apt-get update", ["apt-get", "update", "-q"], log, console)
        _run("apt-get install " + " ".join(missing), ["apt-get", "install", "-y", "-q", *missing], log, console)


def _folder_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def create(
    name: str | None, spec: EnvironmentSpec, *, docker: bool = False, console: Console | None = None
) -> tuple[EnvironmentRecord, bool]:
    """Make the environment of ``spec`` unless it exists, and point ``name`` at it.

    Args:
        name: The name to give it (None: an anonymous environment, known by its id).
        spec: What it holds.
        docker: Also build its docker image.
        console: Where progress goes (None: quiet).

    Returns:
        The record, and whether it already existed (nothing was built but maybe the image).

    Raises:
        ConfigError: A bad name, a Python that is not here, or pip could not install the requirements
            (the message has pip's error and the log's path).
        BackendUnavailableError: With ``docker``: no engine, or the image build failed.
    """
    if name is not None and (not _NAME.match(name) or re.match(r"^[0-9a-f]{12}$", name) or name == DEFAULT_ENVIRONMENT):
        raise ConfigError(
            f"bad environment name {name!r}: letters, digits, '.', '_', '-' (not 12 hex digits, not 'default')"
        )
    env_id = spec.id
    with _locked(env_id):
        record = read_record(env_id)
        cached = record is not None
        if record is None:
            record = _make_venv(spec, console)
    if docker:  # built unless there (also when it was removed by hand)
        record = ready(record, "docker", console)
    if name is not None:
        with _locked("registry"):
            names = _registry()
            names[name] = env_id
            _write_registry(names)
    return record, cached


def _make_venv(spec: EnvironmentSpec, console: Console | None) -> EnvironmentRecord:
    python = find_python(spec.python)
    final = environment_dir(spec.id)
    final.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if final.exists():  # a record-less folder: a build that was killed
        shutil.rmtree(final)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.id}-", dir=final.parent))
    log = final.parent / f"{spec.id}.log"
    log.write_text(f"kernel environment {spec.id}\n")
    try:
        if spec.apt:
            _ensure_apt_on_host(spec.apt, log, console)
        _run(f"making a Python {spec.python} venv", [python, "-m", "venv", str(work / "venv")], log, console)
        (work / "requirements.txt").write_text(spec.requirements_txt())
        venv_python = str(work / "venv" / "bin" / "python")
        _run(
            f"installing {len(spec.requirements)} requirement(s) with {', '.join(KERNEL_NEEDS)}",
            [venv_python, "-m", "pip", "install", "-r", str(work / "requirements.txt"), *KERNEL_NEEDS],
            log,
            console,
        )
        check = "import ipykernel, dill, IPython, sys; print('%d.%d.%d' % sys.version_info[:3])"
        probe = subprocess.run([venv_python, "-c", check], capture_output=True, text=True, env=pip_environment())
        if probe.returncode != 0:
            raise ConfigError(f"the new environment cannot run a kernel: {probe.stderr.strip().splitlines()[-1:]}")
        record = EnvironmentRecord(
            id=spec.id,
            spec=spec,
            python_version=probe.stdout.strip(),
            packages=_installed(venv_python),
            size_bytes=_folder_size(work / "venv"),
            build_seconds=round(time.perf_counter() - started, 1),
        )
        (work / RECORD).write_text(record.model_dump_json(indent=2) + "\n")
        work.rename(final)  # a venv runs from another folder through `python -m` (we never use its scripts)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return record


def _installed(python: str) -> dict[str, str]:
    """``pip freeze`` of a venv as name -> version (the venv's own pip and setuptools left out)."""
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json", "--exclude-editable"],
        capture_output=True,
        text=True,
        env=pip_environment(),
        check=True,
    ).stdout
    skip = {"pip", "setuptools", "wheel"}
    return {d["name"].lower(): d["version"] for d in json.loads(out) if d["name"].lower() not in skip}


# -- the docker image ------------------------------------------------------------------------------------


def build_image(record: EnvironmentRecord, console: Console | None = None) -> str:
    """Build ``themisto-kernel-env:<id>`` from the venv's exact versions unless it exists; return its name.

    Wheels come from the venv's pip (``pip wheel``: cached ones are reused, source distributions built
    here), the base is a debootstrap'ed Debian with the environment's ``--apt`` packages, and the kernel
    image's Dockerfile installs the wheels with no network.

    Raises:
        ConfigError: The environment's Python is not the image's (Debian bookworm's 3.11).
        BackendUnavailableError: No Docker engine, or a build step failed.
    """
    from rich.console import Console

    from themisto_env.sandbox import image as kernel_image

    name = environment_image(record.id)
    if record.spec.python != kernel_image.DEBIAN_PYTHON:
        raise ConfigError(
            f"docker environments run Debian {kernel_image.DEBIAN_SUITE}'s Python {kernel_image.DEBIAN_PYTHON}; "
            f"this one is Python {record.spec.python}"
        )
    console = console or Console(stderr=True, quiet=True)
    client = kernel_image.docker_client()
    if kernel_image.image_exists(client, name):
        return name
    cache = kernel_image.cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    wheelhouse = environments_dir() / "wheels"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"image-{record.id}-", dir=environments_dir()) as tmp:
        pins = [f"{n}=={v}" for n, v in sorted(record.packages.items())]
        frozen = Path(tmp) / "frozen.txt"
        frozen.write_text("".join(f"{p}\n" for p in pins))
        wheels = Path(tmp) / "wheels"
        log = record.folder / "image.log"
        command = [str(record.python), "-m", "pip", "wheel", "--no-deps", "--find-links", str(wheelhouse)]
        try:
            _run("collecting wheels (pip wheel)", [*command, "-w", str(wheels), "-r", str(frozen)], log, console)
        except ConfigError as exc:
            raise BackendUnavailableError(str(exc)) from None
        for wheel in wheels.glob("*.whl"):
            if not (wheelhouse / wheel.name).exists():
                shutil.copy2(wheel, wheelhouse / wheel.name)
        spec = kernel_image.ImageSpec(packages=pins, repository=kernel_image.IMAGE_REPOSITORY)
        include = (*kernel_image.DEBOOTSTRAP_INCLUDE, *record.spec.apt)
        with kernel_image._locked(cache / "build.lock", console):
            base = kernel_image._ensure_base(client, cache, console, include=include)
            context = kernel_image.write_context(spec, Path(tmp) / "context", wheels=sorted(wheels.glob("*.whl")))
            kernel_image._docker_build(
                client,
                context,
                name,
                spec,
                {"BASE_IMAGE": base, "PIP_INSTALL_OPTIONS": "--no-index"},
                "none",
                log,
                console,
                False,
            )
            with contextlib.suppress(Exception):
                client.images.prune(filters={"dangling": True, "label": "themisto-env.stage=build"})
    return name


# -- datasets and removal --------------------------------------------------------------------------------


def note_dataset(env_id: str, folder: str | Path) -> None:
    """Remember that a dataset was built in this environment (``env rm`` checks it)."""
    path = environment_dir(env_id) / DATASETS
    entry = str(Path(folder).resolve())
    have = path.read_text().split("\n") if path.exists() else []
    if entry not in have:
        with open(path, "a") as f:
            f.write(entry + "\n")


def datasets_using(env_id: str) -> list[str]:
    """Dataset folders (of those built here) whose manifest still names this environment."""
    from themisto_env.data.trajectory import read_manifest

    path = environment_dir(env_id) / DATASETS
    users = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(Exception):
            manifest = read_manifest(line)
            if manifest.environment is not None and manifest.environment.id == env_id:
                users.append(line)
    return users


def remove(name: str, *, force: bool = False) -> EnvironmentRecord:
    """Remove a name; the environment goes too once no other name points at it and no dataset built
    here uses it (``force`` removes it anyway). Its docker image is removed with it.

    Raises:
        ConfigError: No such environment, or a dataset still uses it (the message names one).
    """
    record = resolve(name)
    with _locked("registry"):
        names = _registry()
        others = [n for n, i in names.items() if i == record.id and n != name]
        users = datasets_using(record.id)
        if users and not others and not force:
            raise ConfigError(
                f"kernel environment {name} ({record.id}) is used by {len(users)} dataset(s), e.g. {users[0]}; "
                "`themisto env rm --force` removes it anyway"
            )
        names.pop(name, None)
        _write_registry(names)
    if not others:
        with _locked(record.id):
            if record.image is not None:
                with contextlib.suppress(Exception):
                    from themisto_env.sandbox.image import docker_client

                    docker_client().images.remove(record.image)
            shutil.rmtree(record.folder, ignore_errors=True)
            record.folder.with_name(f"{record.id}.log").unlink(missing_ok=True)
    return record


def ready(record: EnvironmentRecord, backend: str, console: Console | None = None) -> EnvironmentRecord:
    """The environment, ready for ``backend``: its docker image built first where the backend is docker
    and the image is missing (about a minute; later uses are instant).

    Raises:
        BackendUnavailableError: No Docker engine, or the image build failed.
    """
    if backend == "docker" and (record.image is None or not _image_present(record.image)):
        if console is None:
            log.warning("building the docker image of kernel environment %s (once; about a minute)", record.id)
        with _locked(record.id):
            record.image = build_image(record, console)
            _write_record(record)
    return record


def _image_present(name: str) -> bool:
    from themisto_env.sandbox.image import docker_client, image_exists

    return image_exists(docker_client(), name)


def create_command(ref: EnvironmentRef, folder: str | Path) -> str:
    """The command that makes a dataset's environment again (from ``environment-requirements.txt``)."""
    parts = [
        "themisto env create",
        ref.name or f"env-{ref.id}",
        "--requirements",
        str(Path(folder) / REQUIREMENTS_FILE),
    ]
    parts += [f"--apt {package}" for package in ref.apt]
    parts.append(f"--python {ref.python}")
    return " ".join(parts)


def use_environment(name_or_id: str | None, *, backend: str, manifest: Manifest, out: str | Path) -> str | None:
    """For ``themisto data build --env``: the environment's id (None: the tool's own Python), recorded in
    ``manifest`` with its requirements (also written to ``out/environment-requirements.txt``).

    Raises:
        ConfigError: No such environment.
        BackendUnavailableError: Its docker image is needed and cannot be built.
    """
    from themisto_env.data.trajectory import EnvironmentRef

    if name_or_id is None or name_or_id == DEFAULT_ENVIRONMENT:
        manifest.environment = None
        return None
    record = ready(resolve(name_or_id), backend)
    names = names_of(record.id)
    manifest.environment = EnvironmentRef(
        id=record.id,
        name=name_or_id if name_or_id in names else (names[0] if names else None),
        python=record.spec.python,
        requirements=record.spec.requirements_txt(),
        apt=record.spec.apt,
    )
    (Path(out) / REQUIREMENTS_FILE).write_text(record.spec.requirements_txt())
    note_dataset(record.id, out)
    return record.id


def dataset_environment(folder: str | Path, choice: str | None = None, *, backend: str = "local") -> str | None:
    """The environment a dataset's kernels run in: ``choice`` (a name or id; ``default``: the tool's own
    Python), else the one its manifest records.

    Raises:
        BackendUnavailableError: The dataset's environment is not on this machine (the message is the
            command that makes it again), or its docker image cannot be built.
        ConfigError: ``choice`` names no environment here.
    """
    from themisto_env.data.trajectory import read_manifest

    if choice == DEFAULT_ENVIRONMENT:
        return None
    if choice is not None:
        return ready(resolve(choice), backend).id
    ref = read_manifest(folder).environment
    if ref is None:
        return None
    record = read_record(ref.id)
    if record is None:
        raise BackendUnavailableError(
            f"{folder} was replayed in kernel environment {ref.id}, which is not on this machine: make it with "
            f"`{create_command(ref, folder)}`"
        )
    return ready(record, backend).id
