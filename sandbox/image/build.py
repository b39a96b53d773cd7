"""Building kernel images: the default image from the host's package set, and any image from wheels.

`build_image` builds ``themisto-kernel:<tag>`` (see `themisto_env.sandbox.image.spec`) unless it
exists, with no registry (the default: wheels downloaded on the host, the base from
`themisto_env.sandbox.image.debootstrap`, ``pip install --no-index`` in a build with no network) or from
``python:3.11-slim-bookworm`` where a registry is reachable. `build_from_wheels` is the no-registry
build for wheels already at hand (the kernel environments' images use it, with their own Debian
packages). Builds sharing the cache take turns (`build_lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.engine import docker_client, image_exists, image_id
from themisto_env.sandbox.image.debootstrap import DEBOOTSTRAP_INCLUDE, ensure_base, run_step
from themisto_env.sandbox.image.spec import (
    DEBIAN_PYTHON,
    RECIPE_VERSION,
    ImageSpec,
    cache_dir,
    default_spec,
    write_context,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "BuildMethod",
    "build_from_wheels",
    "build_image",
    "build_lock",
    "build_once",
    "docker_build",
    "download_wheels",
]

BuildMethod = Literal["debootstrap", "dockerfile"]
#: The label of a multi-stage build's first stage (venv + wheels), dropped once the image is built.
BUILD_STAGE_LABEL = "themisto-env.stage=build"


def build_image(
    spec: ImageSpec | None = None,
    *,
    force: bool = False,
    method: BuildMethod = "debootstrap",
    console: Console | None = None,
) -> str:
    """Build the kernel image for ``spec`` (default: `default_spec`) unless it exists.

    Args:
        spec: The package set; default the host's versions of `DEFAULT_PACKAGES`.
        force: Rebuild even if the image exists (the cached wheels and base are still reused).
        method: ``debootstrap`` (no registry; needs root and debootstrap) or ``dockerfile`` (``docker
            build`` from ``python:3.11-slim-bookworm``; needs a registry).
        console: Where progress goes (default: a rich console on stderr).

    Returns:
        The image name, ``themisto-kernel:<tag>``.

    Raises:
        BackendUnavailableError: No Docker engine, a missing tool, or a failed step (the message names
            the step and the log file).
    """
    from rich.console import Console

    if method not in ("debootstrap", "dockerfile"):
        raise ValueError(f"unknown build method {method!r}; use 'debootstrap' or 'dockerfile'")
    spec = spec or default_spec()
    console = console or Console(stderr=True)
    client = docker_client()
    cache = cache_dir()

    def build(tmp: Path) -> None:
        context = tmp / "context"
        if method == "debootstrap":
            wheels = download_wheels(spec, cache, tmp / "wheels", console)
            build_from_wheels(
                client, spec, spec.image_name, wheels, context=context, log=cache / "build.log", console=console,
                no_cache=force,
            )  # fmt: skip
        else:
            write_context(spec, context)
            docker_build(client, context, spec.image_name, spec, {}, "default", cache / "build.log", console, force)
            _drop_build_stage(client)

    return build_once(client, spec.image_name, build, what="kernel image", lock="build", force=force, console=console)


def build_once(
    client: Any, name: str, build: Callable[[Path], None], *, what: str, lock: str, force: bool, console: Console
) -> str:
    """Build image ``name`` with ``build`` (given a temporary folder in the cache) unless it exists (or
    ``force``), one build at a time (`build_lock` on ``<cache>/<lock>.lock``); return ``name``. A forced
    rebuild drops the image it replaced (one a container still uses is kept)."""
    if not force and image_exists(client, name):
        console.print(f"[green]✓[/] {what} {name} exists")
        return name
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (
        build_lock(cache / f"{lock}.lock", console),
        tempfile.TemporaryDirectory(prefix=f"{lock}-", dir=cache) as tmp,
    ):
        if not force and image_exists(client, name):  # built by whoever held the lock
            console.print(f"[green]✓[/] {what} {name} exists")
            return name
        replaced = image_id(client, name)
        build(Path(tmp))
        if replaced is not None and replaced != image_id(client, name):
            with contextlib.suppress(Exception):
                client.images.remove(replaced)
    size = client.images.get(name).attrs.get("Size", 0)
    console.print(f"[green]✓[/] built {name} in {time.perf_counter() - started:.0f} s ({size / 1e6:.0f} MB)")
    return name


def build_from_wheels(
    client: Any,
    spec: ImageSpec,
    name: str,
    wheels: list[Path],
    *,
    context: Path,
    log: Path,
    console: Console,
    include: tuple[str, ...] = DEBOOTSTRAP_INCLUDE,
    no_cache: bool = False,
) -> None:
    """Build image ``name`` for ``spec`` from ``wheels`` with no registry and no network: on the debootstrap
    base with the Debian packages ``include`` (made first if missing), the image's Dockerfile installs the
    wheels with ``pip install --no-index``. The caller holds `build_lock`.

    Args:
        client: A ``docker.DockerClient``.
        context: An empty folder for the build context.
        log: Where the ``docker build`` output goes.
        no_cache: Build every step again (``docker build --no-cache``).

    Raises:
        BackendUnavailableError: A build step failed (the message names it and the log file).
    """
    base = ensure_base(client, cache_dir(), console, include=include)
    write_context(spec, context, wheels=wheels)
    buildargs = {"BASE_IMAGE": base, "PIP_INSTALL_OPTIONS": "--no-index"}
    docker_build(client, context, name, spec, buildargs, "none", log, console, no_cache)
    _drop_build_stage(client)


def _drop_build_stage(client: Any) -> None:
    """Remove the dangling first stage (venv + wheels) that a multi-stage build leaves behind."""
    with contextlib.suppress(Exception):
        client.images.prune(filters={"dangling": True, "label": BUILD_STAGE_LABEL})


@contextlib.contextmanager
def build_lock(path: Path, console: Console) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (two builds at once share the cache)."""
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with console.status("another build holds the image cache; waiting"):
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def download_wheels(spec: ImageSpec, cache: Path, dest: Path, console: Console) -> list[Path]:
    """Wheels of ``spec`` for the image's Python in ``dest``, from the wheel cache when it has them all,
    else from the index (new ones are added to the cache)."""
    store = cache / "wheels"
    store.mkdir(exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "requirements.txt").write_text(spec.requirements_txt())
    (dest / "constraints.txt").write_text(spec.constraints_txt())
    base_cmd = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
        "--only-binary=:all:", "--python-version", DEBIAN_PYTHON,
        "--find-links", str(store), "-d", str(dest),
        "-r", str(dest / "requirements.txt"), "-c", str(dest / "constraints.txt"),
    ]  # fmt: skip
    log = cache / "pip-download.log"
    try:
        run_step("collecting wheels from the cache", [*base_cmd, "--no-index"], log, console)
    except BackendUnavailableError:
        run_step("downloading wheels (pip download --only-binary=:all:)", base_cmd, log, console)
    wheels = sorted(dest.glob("*.whl"))
    if unnamed := unpinned_wheels(spec, wheels):
        raise BackendUnavailableError(
            f"the kernel image {spec.image_name} would hold {', '.join(unnamed)}, which its tag does not name "
            "(not installed here at that version): install them here (pip install 'themisto-env'), then build again"
        )
    for wheel in wheels:
        if not (store / wheel.name).exists():
            shutil.copy2(wheel, store / wheel.name)
    return wheels


def unpinned_wheels(spec: ImageSpec, wheels: list[Path]) -> list[str]:
    """``name==version`` of the wheels whose version ``spec`` does not pin: what an image built from them
    would hold although its tag (a hash of the spec) does not say so (e.g. a dependency absent here)."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    pins = {}
    for pin in (*spec.packages, *spec.constraints):
        name, _, version = pin.partition("==")
        pins[canonicalize_name(name)] = Version(version) if version else None
    unnamed = []
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if pins.get(name) != version:
            unnamed.append(f"{name}=={version}")
    return unnamed


def docker_build(
    client: Any,
    context: Path,
    name: str,
    spec: ImageSpec,
    buildargs: dict[str, str],
    network: str,
    log: Path,
    console: Console,
    no_cache: bool,
    labels: dict[str, str] | None = None,
) -> None:
    """``docker build`` of ``context`` as image ``name`` (labelled with ``spec``'s packages, or ``labels``
    when given), its output in ``log`` and its current step on the console.

    Raises:
        BackendUnavailableError: The build failed (the message has the log's tail).
    """
    started = time.perf_counter()
    if labels is None:
        labels = {
            "themisto-env.image": "kernel",
            "themisto-env.recipe": RECIPE_VERSION,
            "themisto-env.packages": " ".join(spec.packages),
        }
    with console.status(f"docker build {name}…") as status, open(log, "w") as out:
        stream = client.api.build(
            path=str(context),
            tag=name,
            buildargs=buildargs,
            labels=labels,
            network_mode=network,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=no_cache,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                out.write(chunk["error"])
                out.flush()
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                raise BackendUnavailableError(f"docker build of {name} failed; log: {log}\n{tail}")
            text = chunk.get("stream", "")
            out.write(text)
            if text.startswith("Step "):
                status.update(f"docker build {name}: {text.strip()}")
    console.print(f"[green]✓[/] docker build ({time.perf_counter() - started:.1f} s)")
