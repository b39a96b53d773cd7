"""The server image: ``themisto serve`` in a container, built with no registry (``themisto sandbox build-image
--server``).

The image ``themisto-serve:<tag>`` is built ``FROM`` the kernel image (`themisto_env.sandbox.image`: Python
and the kernel's packages at this host's versions) by ``image/Dockerfile``, with no network. It adds:

* the server's other dependencies (openenv-core and what it needs, fastapi, ...) at this host's versions: wheels
  collected here with ``pip wheel --no-deps`` (from the image cache's wheels first, else the index);
* the bundled data replayed on this host with the local backend (the dataset folder and its snapshots), so
  a container serves at once rather than after minutes of replay;
* themisto-env itself, a wheel made from the checkout this package runs from.

The tag is a hash of all of it (the kernel image's name, the pins, the Dockerfile, the source files, the
data's files): a change anywhere is a new image, and an unchanged one is not built again. Inside the
container kernels run with the local backend (the container is the isolation) and the server listens on
0.0.0.0:8000; it refuses to start without ``THEMISTO_SERVE_TOKEN``::

    docker run --rm --init -p 127.0.0.1:8000:8000 -e THEMISTO_SERVE_TOKEN=... themisto-serve:<tag>
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import json
import os
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto_env.errors import BackendUnavailableError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CONTAINER_PORT",
    "SERVER_REPOSITORY",
    "TOKEN_VARIABLE",
    "ServerImageInputs",
    "build_server_image",
    "server_image_inputs",
    "source_root",
]

#: Repository part of the server image's name.
SERVER_REPOSITORY = "themisto-serve"
#: Where the server listens inside the container.
CONTAINER_PORT = 8000
#: The variable the container reads its token from (``themisto serve`` reads it too).
TOKEN_VARIABLE = "THEMISTO_SERVE_TOKEN"
#: Bump when the build changes in a way the Dockerfile's text does not show.
RECIPE_VERSION = "1"
#: What the server needs beyond the package's own dependencies (the ``serve`` extra).
SERVER_PACKAGES = ("themisto-env", "openenv-core", "prometheus-client")
#: The image's label (``themisto-env.image=server``): how older server images are found and removed.
IMAGE_LABEL = "server"
_SKIP_DIRS = frozenset({"__pycache__"})
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class ServerImageInputs:
    """Everything the server image is made of; its `name` is a hash of them.

    Attributes:
        kernel_image: The kernel image it is built from (its tag a hash of the kernel's packages).
        pins: ``name==version`` of the server's dependencies the kernel image lacks (this host's versions).
        source: The themisto-env checkout (its ``pyproject.toml`` folder).
        source_digest: Hash of the source files that go into the wheel.
        dataset: The bundled dataset folder (replayed on this host with the local backend).
        snapshots: The snapshot files of its steps (``.dill``, and ``.env`` records where present).
        data_digest: Hash of the dataset's files and of the snapshots' names.
    """

    kernel_image: str
    pins: tuple[str, ...]
    source: Path
    source_digest: str
    dataset: Path
    snapshots: tuple[Path, ...]
    data_digest: str

    @property
    def tag(self) -> str:
        """The image tag: a hash of the inputs and of the recipe."""
        payload = json.dumps(
            {
                "recipe": RECIPE_VERSION,
                "dockerfile": dockerfile_text(),
                "kernel": self.kernel_image,
                "pins": sorted(self.pins),
                "source": self.source_digest,
                "data": self.data_digest,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        """``themisto-serve:<tag>``."""
        return f"{SERVER_REPOSITORY}:{self.tag}"


def dockerfile_text() -> str:
    """The shipped ``image/Dockerfile`` of the server."""
    return (importlib.resources.files("themisto_env.bridges.openenv") / "image" / "Dockerfile").read_text()


def source_root() -> Path:
    """The themisto-env checkout this package runs from (an editable install).

    Raises:
        BackendUnavailableError: The package is installed as a wheel, with no ``pyproject.toml`` beside it.
    """
    import themisto_env

    root = Path(themisto_env.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    try:
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        name = None
    if name != "themisto-env":
        raise BackendUnavailableError(
            f"the server image is built from a checkout of themisto-env, but this one is installed in {root}: "
            "run the command from a checkout installed with `pip install -e '.[serve]'`"
        )
    return root


def _source_files(root: Path) -> list[Path]:
    """The files a wheel of ``root`` is made from: ``pyproject.toml``, ``README.md`` and the package folders
    of ``[tool.setuptools] package-dir`` (byte-code left out)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    folders = sorted(set(config["tool"]["setuptools"]["package-dir"].values()))
    files = [root / "pyproject.toml", root / "README.md"]
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
            files += [Path(dirpath) / f for f in sorted(filenames) if not f.endswith(_SKIP_SUFFIXES)]
    return files


def _digest_files(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(root)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _server_pins(kernel_names: set[str], snapshot_packages: list[str]) -> tuple[str, ...]:
    """This host's versions of what the server needs and the kernel image lacks (themisto-env left out:
    its wheel is made from the checkout), with the packages the data's snapshots were written with (a
    kernel on the host may load some the kernel image lacks, e.g. psutil)."""
    from packaging.utils import canonicalize_name

    from themisto_env.bridges.openenv.deps import require_openenv
    from themisto_env.sandbox.image.spec import ImageSpec

    require_openenv()
    spec = ImageSpec.from_host([*SERVER_PACKAGES, *(n for n in snapshot_packages if n not in kernel_names)])
    skip = kernel_names | {"themisto-env"}
    return tuple(
        sorted(p for p in (*spec.packages, *spec.constraints) if canonicalize_name(p.split("==")[0]) not in skip)
    )


def _bundled_data(progress: bool) -> tuple[Path, tuple[Path, ...], str]:
    """The bundled dataset replayed on this host with the local backend (built first if missing: minutes),
    its snapshot files, and a hash of both."""
    from themisto_env.data.trajectory import iter_trajectories
    from themisto_env.replay.resolve import resolve_dataset
    from themisto_env.sandbox.store.snapshot_store import SnapshotStore

    folder = resolve_dataset(None, backend="local", progress=progress).resolve()
    store = SnapshotStore()
    digests = sorted({s.snapshot for t in iter_trajectories(folder) for s in t.steps if s.snapshot is not None})
    snapshots: list[Path] = []
    for name in digests:
        path = store.path(name)
        snapshots.append(path)
        if path.with_suffix(".env").exists():
            snapshots.append(path.with_suffix(".env"))
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    digest = _digest_files(files, folder)
    envs = [p.read_text() for p in snapshots if p.suffix == ".env"]
    data_digest = hashlib.sha256(json.dumps([folder.name, digest, digests, envs]).encode()).hexdigest()
    return folder, tuple(snapshots), data_digest


def server_image_inputs(kernel_image: str, *, progress: bool = True) -> ServerImageInputs:
    """What the server image for ``kernel_image`` is made of on this host (see `ServerImageInputs`).

    Builds the bundled data first when this host has not replayed it yet (minutes, with ``progress``).

    Raises:
        BackendUnavailableError: Not a checkout, or openenv-core or a dependency is not installed here.
    """
    from themisto_env.data.trajectory import read_manifest
    from themisto_env.sandbox.image.spec import default_spec

    root = source_root()
    kernel = default_spec()
    kernel_names = {p.split("==")[0] for p in (*kernel.packages, *kernel.constraints)}
    dataset, snapshots, data_digest = _bundled_data(progress)
    pins = _server_pins(kernel_names, sorted(read_manifest(dataset).packages))
    return ServerImageInputs(
        kernel_image=kernel_image,
        pins=pins,
        source=root,
        source_digest=_digest_files(_source_files(root), root),
        dataset=dataset,
        snapshots=snapshots,
        data_digest=data_digest,
    )


def build_server_image(*, force: bool = False, console: Console | None = None) -> str:
    """Build the server image unless it exists (the kernel image first, and the bundled data, if missing).

    Args:
        force: Rebuild the server image even if it exists, every layer (cached wheels and data are still
            reused; the kernel image is rebuilt by `build_image`).
        console: Where progress goes (default: a rich console on stderr).

    Returns:
        The image name, ``themisto-serve:<tag>``.

    Raises:
        BackendUnavailableError: No Docker engine, not a checkout, a missing package, or a failed step (the
            message names the step and its log).
    """
    from rich.console import Console

    from themisto_env.sandbox.engine import docker_client
    from themisto_env.sandbox.image.build import build_image, build_once, docker_build
    from themisto_env.sandbox.image.spec import ImageSpec, cache_dir

    console = console or Console(stderr=True)
    kernel_image = build_image(console=console)
    inputs = server_image_inputs(kernel_image)
    client = docker_client()
    cache = cache_dir()

    def build(tmp: Path) -> None:
        context = tmp / "context"
        _write_context(inputs, context, cache, console)
        labels = {
            "themisto-env.image": IMAGE_LABEL,
            "themisto-env.recipe": RECIPE_VERSION,
            "themisto-env.kernel-image": kernel_image,
        }
        packages = ImageSpec(packages=list(inputs.pins) or ["openenv-core"])
        log = cache / "serve-build.log"
        docker_build(
            client, context, inputs.name, packages, {"KERNEL_IMAGE": kernel_image}, "none", log, console, force,
            labels=labels,
        )  # fmt: skip
        _remove_older_images(client, inputs.name)

    return build_once(client, inputs.name, build, what="server image", lock="serve-build", force=force, console=console)


def _write_context(inputs: ServerImageInputs, context: Path, cache: Path, console: Console) -> None:
    """The build context: ``Dockerfile``, ``deps/`` (wheels and their list), ``data/`` (the cache layout:
    ``datasets/<name>/`` and ``snapshots/``), ``app/`` (the themisto-env wheel)."""
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(dockerfile_text())
    deps = context / "deps"
    _collect_wheels(inputs.pins, deps, cache, console)
    (deps / "requirements.txt").write_text("".join(f"{p}\n" for p in inputs.pins))
    data = context / "data"
    _link(inputs.dataset, data / "datasets" / inputs.dataset.name, skip_hidden=True)
    (data / "snapshots").mkdir(parents=True, exist_ok=True)
    for path in inputs.snapshots:  # <store>/<2 hex>/<digest>.dill
        _link(path, data / "snapshots" / path.parent.name / path.name)
    _build_wheel(inputs.source, context / "app", cache, console)


def _link(source: Path, dest: Path, *, skip_hidden: bool = False) -> None:
    """Hard-link (or copy) a file, or a folder's files, to ``dest``."""
    if source.is_dir():
        for path in source.rglob("*"):
            if path.is_file() and not (skip_hidden and path.name.startswith(".")):
                _link(path, dest / path.relative_to(source))
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def _collect_wheels(pins: tuple[str, ...], dest: Path, cache: Path, console: Console) -> None:
    """Wheels of ``pins`` (no dependencies: the pins are the whole set) in ``dest``, from the image cache's
    wheels when it has them all, else from the index (source distributions built here); new ones are
    added to the cache."""
    from themisto_env.sandbox.image.debootstrap import run_step

    store = cache / "wheels"
    store.mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    cached = _cached_wheels(pins, store)
    if cached is not None:  # all there: no pip run (it takes seconds to say so)
        for wheel in cached:
            _link(wheel, dest / wheel.name)
        console.print(f"[green]✓[/] the server's {len(cached)} wheels are in the cache")
        return
    pinned = dest.parent / "pins.txt"
    pinned.write_text("".join(f"{p}\n" for p in pins))
    command = [
        sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
        "--find-links", str(store), "-w", str(dest), "-r", str(pinned),
    ]  # fmt: skip
    log = cache / "serve-wheels.log"
    try:
        run_step("collecting the server's wheels from the cache", [*command, "--no-index"], log, console)
    except BackendUnavailableError:
        run_step("collecting the server's wheels (pip wheel)", command, log, console)
    pinned.unlink()
    for wheel in dest.glob("*.whl"):
        if not (store / wheel.name).exists():
            shutil.copy2(wheel, store / wheel.name)


def _cached_wheels(pins: tuple[str, ...], store: Path) -> list[Path] | None:
    """A wheel in ``store`` for each pin that this Python can install, or None if one is missing."""
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    supported = set(sys_tags())
    found: dict[tuple[str, str], Path] = {}
    for wheel in store.glob("*.whl"):
        try:
            name, version, _build, tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if not tags.isdisjoint(supported):
            found[(name, str(version))] = wheel
    wanted = [(canonicalize_name(p.split("==")[0]), str(Version(p.split("==")[1]))) for p in pins]
    if any(key not in found for key in wanted):
        return None
    return [found[key] for key in wanted]


def _build_wheel(root: Path, dest: Path, cache: Path, console: Console) -> None:
    """A wheel of the checkout at ``root`` in ``dest``, built from a copy of its source files (the checkout
    gets no ``build/`` folder) with the installed setuptools (no network)."""
    from themisto_env.sandbox.image.debootstrap import run_step

    with tempfile.TemporaryDirectory(prefix="serve-source-", dir=cache) as tmp:
        copy = Path(tmp)
        for path in _source_files(root):
            target = copy / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        command = [
            sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
            "--no-build-isolation", "-w", str(dest), str(copy),
        ]  # fmt: skip
        run_step("building the themisto-env wheel", command, cache / "serve-wheel.log", console)


def _remove_older_images(client: Any, keep: str) -> None:
    """Remove the server images other than ``keep`` (one in use by a container stays)."""
    for image in client.images.list(filters={"label": f"themisto-env.image={IMAGE_LABEL}"}):
        for tag in image.tags:
            if tag.startswith(f"{SERVER_REPOSITORY}:") and tag != keep:
                with contextlib.suppress(Exception):
                    client.images.remove(tag)
