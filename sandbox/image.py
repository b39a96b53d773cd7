"""The kernel container image: its package set, its name, and how to build it with no registry.

The image is named ``themisto-kernel:<tag>``, where the tag is a hash of the package set and of the
recipe (``image/Dockerfile``): a changed package set is a new image, never a stale one. The default
package set is the *host's* exact versions of :data:`DEFAULT_PACKAGES` and of everything they depend on,
because a dill snapshot only loads under the versions that wrote it.

There is one recipe, ``image/Dockerfile``, and two ways to feed it:

* with a registry, ``docker build`` of the context from :func:`write_context` (base
  ``python:3.11-slim-bookworm``, pip reaches the index);
* with none (:func:`build_image`, the default): wheels are downloaded on the host
  (``pip download --only-binary=:all:``), a minimal Debian is made with ``debootstrap`` and
  ``docker import``-ed as the base, and the same Dockerfile is built from it with ``pip install
  --no-index`` and no network.

Downloaded wheels, the debootstrap tarball and the imported base image are cached (see :func:`cache_dir`),
so a rebuild after a package change skips debootstrap. Run ``python -m themisto_env.sandbox.image --help``
for the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.docker_engine import docker_client, image_exists, image_id

if TYPE_CHECKING:
    from rich.console import Console

#: Top-level packages of the default kernel image (pinned to the host's versions).
DEFAULT_PACKAGES: tuple[str, ...] = (
    "ipykernel",
    "dill",
    "numpy",
    "pandas",
    "scikit-learn",
    "scipy",
    "matplotlib",
)
#: Packages the image carries when the host has them: pandas stores strings with pyarrow when it is
#: installed, and a snapshot holding such strings loads only where pyarrow is installed too.
OPTIONAL_PACKAGES: tuple[str, ...] = ("pyarrow",)
#: Repository part of the kernel image name.
IMAGE_REPOSITORY = "themisto-kernel"
#: Repository part of the imported debootstrap base image.
BASE_REPOSITORY = "themisto-kernel-base"
#: Debian release of the image, and its Python (the wheels must match it).
DEBIAN_SUITE = "bookworm"
DEBIAN_PYTHON = "3.11"
#: Debian packages of the debootstrap base.
DEBOOTSTRAP_INCLUDE: tuple[str, ...] = ("python3", "python3-venv")
#: Bump when the build changes in a way the Dockerfile's text does not show.
RECIPE_VERSION = "1"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

BuildMethod = Literal["debootstrap", "dockerfile"]


class ImageSpec(BaseModel):
    """What goes into a kernel image.

    Attributes:
        packages: Requirement strings of the top-level packages, e.g. ``"numpy==2.4.6"``.
        constraints: Pins for their dependencies (pip ``-c``); pins of packages nothing requires are
            ignored.
        repository: Repository part of the image name (not part of the tag).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: list[str] = Field(min_length=1)
    constraints: list[str] = Field(default_factory=list)
    repository: str = IMAGE_REPOSITORY

    @classmethod
    def from_host(cls, names: Iterable[str] = DEFAULT_PACKAGES) -> ImageSpec:
        """Pin ``names`` and all their installed dependencies to the versions installed on this host.

        Raises:
            BackendUnavailableError: One of ``names`` is not installed here.
        """
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        roots = [canonicalize_name(n) for n in names]
        missing = [n for n in roots if _distribution(n) is None]
        if missing:
            raise BackendUnavailableError(
                f"cannot pin the kernel image to this host's versions: {', '.join(missing)} not installed; "
                "install them or pass an explicit ImageSpec(packages=[...])"
            )
        versions: dict[str, str] = {}
        stack = list(roots)
        while stack:
            name = stack.pop()
            if name in versions:
                continue
            dist = _distribution(name)
            if dist is None:  # a dependency absent here: pip chooses its version
                continue
            metadata = dist.metadata  # parsed anew on every access: read once
            versions[name] = metadata["Version"]
            for line in metadata.get_all("Requires-Dist") or []:
                try:
                    req = Requirement(line)
                except InvalidRequirement:
                    continue
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    stack.append(canonicalize_name(req.name))
        return cls(
            packages=[f"{n}=={versions[n]}" for n in roots],
            constraints=sorted(f"{n}=={v}" for n, v in versions.items() if n not in roots),
        )

    @property
    def tag(self) -> str:
        """Hash of the package set and the recipe: the image tag."""
        payload = json.dumps(
            {
                "recipe": RECIPE_VERSION,
                "dockerfile": dockerfile_text(),
                "suite": DEBIAN_SUITE,
                "packages": sorted(self.packages),
                "constraints": sorted(self.constraints),
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def image_name(self) -> str:
        """``<repository>:<tag>``."""
        return f"{self.repository}:{self.tag}"

    def requirements_txt(self) -> str:
        """Text of ``requirements.txt``."""
        return "".join(f"{p}\n" for p in self.packages)

    def constraints_txt(self) -> str:
        """Text of ``constraints.txt``."""
        return "".join(f"{c}\n" for c in self.constraints)


@functools.cache
def _distribution(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def default_spec() -> ImageSpec:
    """The host-pinned spec of :data:`DEFAULT_PACKAGES`, and of those :data:`OPTIONAL_PACKAGES` the host
    has (computed once per process)."""
    return ImageSpec.from_host([*DEFAULT_PACKAGES, *(n for n in OPTIONAL_PACKAGES if _distribution(n) is not None)])


def default_image() -> str:
    """Name of the default kernel image, e.g. ``themisto-kernel:3f2a9c01b7de``."""
    return default_spec().image_name


@functools.cache
def dockerfile_text() -> str:
    """The shipped ``image/Dockerfile``."""
    return (importlib.resources.files("themisto_env.sandbox") / "image" / "Dockerfile").read_text()


def cache_dir() -> Path:
    """Where wheels and the debootstrap tarball are kept: ``$THEMISTO_CACHE/image`` if set, else
    ``$XDG_CACHE_HOME/themisto-env/image`` (``~/.cache/themisto-env/image``)."""
    if root := os.environ.get("THEMISTO_CACHE"):
        return Path(root).expanduser() / "image"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "themisto-env" / "image"


def debian_mirror() -> str:
    """The Debian mirror apt uses here (``$THEMISTO_DEBIAN_MIRROR`` wins), else deb.debian.org."""
    if env := os.environ.get("THEMISTO_DEBIAN_MIRROR"):
        return env
    apt = Path("/etc/apt")
    files = [
        *sorted(apt.glob("sources.list.d/*.sources")),
        apt / "sources.list",
        *sorted(apt.glob("sources.list.d/*.list")),
    ]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\S+):\s*(.*)$", stanza, flags=re.MULTILINE))
                types, suites = fields.get("Types", "").split(), fields.get("Suites", "").split()
                if "deb" in types and DEBIAN_SUITE in suites:
                    uris = fields.get("URIs", "").split()
                    if uris:
                        return uris[0]
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and m.group(2) == DEBIAN_SUITE:
                    return m.group(1)
    return DEFAULT_MIRROR


def write_context(spec: ImageSpec, dest: Path, *, wheels: Iterable[Path] = ()) -> Path:
    """Write a ``docker build`` context for ``spec`` into ``dest``: the Dockerfile, ``requirements.txt``,
    ``constraints.txt`` and ``wheels/`` (hard links or copies of ``wheels``; may be empty). Returns
    ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "Dockerfile").write_text(dockerfile_text())
    (dest / "requirements.txt").write_text(spec.requirements_txt())
    (dest / "constraints.txt").write_text(spec.constraints_txt())
    wheel_dir = dest / "wheels"
    wheel_dir.mkdir(exist_ok=True)
    (wheel_dir / "README").write_text("Wheels put here are preferred by pip (--find-links).\n")
    for wheel in wheels:
        target = wheel_dir / wheel.name
        if target.exists():
            continue
        try:
            os.link(wheel, target)
        except OSError:
            shutil.copy2(wheel, target)
    return dest


def build_image(
    spec: ImageSpec | None = None,
    *,
    force: bool = False,
    method: BuildMethod = "debootstrap",
    console: Console | None = None,
) -> str:
    """Build the kernel image for ``spec`` (default: :func:`default_spec`) unless it exists.

    Args:
        spec: The package set; default the host's versions of :data:`DEFAULT_PACKAGES`.
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

    spec = spec or default_spec()
    console = console or Console(stderr=True)
    client = docker_client()
    name = spec.image_name
    if not force and image_exists(client, name):
        console.print(f"[green]✓[/] kernel image {name} exists")
        return name
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (
        _locked(cache / "build.lock", console),
        tempfile.TemporaryDirectory(prefix="build-", dir=cache) as tmp,
    ):
        if not force and image_exists(client, name):  # built by whoever held the lock
            console.print(f"[green]✓[/] kernel image {name} exists")
            return name
        context = Path(tmp) / "context"
        if method == "debootstrap":
            base = _ensure_base(client, cache, console)
            wheels = _download_wheels(spec, cache, Path(tmp) / "wheels", console)
            write_context(spec, context, wheels=wheels)
            buildargs = {"BASE_IMAGE": base, "PIP_INSTALL_OPTIONS": "--no-index"}
            network = "none"
        elif method == "dockerfile":
            write_context(spec, context)
            buildargs, network = {}, "default"
        else:
            raise ValueError(f"unknown build method {method!r}; use 'debootstrap' or 'dockerfile'")
        replaced = image_id(client, name)
        _docker_build(client, context, name, spec, buildargs, network, cache / "build.log", console, force)
        # The multi-stage build leaves its first stage (venv + wheels) as a dangling image, and a forced
        # rebuild the image it replaced: drop both (an image a container still uses is kept).
        with contextlib.suppress(Exception):
            client.images.prune(filters={"dangling": True, "label": "themisto-env.stage=build"})
        if replaced is not None and replaced != image_id(client, name):
            with contextlib.suppress(Exception):
                client.images.remove(replaced)
    size = client.images.get(name).attrs.get("Size", 0)
    console.print(
        f"[green]✓[/] built {name} in {time.perf_counter() - started:.0f} s ({size / 1e6:.0f} MB)",
    )
    return name


@contextlib.contextmanager
def _locked(path: Path, console: Console) -> Iterator[None]:
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


def _run_step(what: str, cmd: list[str], log: Path, console: Console, **kwargs: Any) -> None:
    """Run one build step with a spinner, its output in ``log``; raise with the log's tail on failure."""
    started = time.perf_counter()
    with console.status(f"{what}…"), open(log, "wb") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, **kwargs)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BackendUnavailableError(
            f"kernel image build failed while {what} (exit {proc.returncode}); log: {log}\n{tail}"
        )
    console.print(f"[green]✓[/] {what} ({time.perf_counter() - started:.1f} s)")


def _ensure_base(client: Any, cache: Path, console: Console, *, include: tuple[str, ...] = DEBOOTSTRAP_INCLUDE) -> str:
    """The imported debootstrap base image with the Debian packages ``include``, made (and its tarball
    cached) if missing."""
    key = hashlib.sha256(f"{DEBIAN_SUITE} {' '.join(include)}".encode()).hexdigest()[:12]
    base = f"{BASE_REPOSITORY}:{DEBIAN_SUITE}-{key}"
    if image_exists(client, base):
        console.print(f"[green]✓[/] base image {base} exists")
        return base
    tarball = cache / f"rootfs-{DEBIAN_SUITE}-{key}.tar"
    if not tarball.exists():
        _debootstrap(tarball, cache, console, include)
    started = time.perf_counter()
    with console.status(f"importing {tarball.name} as {base}…"):
        repository, _, tag = base.partition(":")
        client.api.import_image_from_file(str(tarball), repository=repository, tag=tag)
    console.print(f"[green]✓[/] imported {base} ({time.perf_counter() - started:.1f} s)")
    return base


def _debootstrap(tarball: Path, cache: Path, console: Console, include: tuple[str, ...] = DEBOOTSTRAP_INCLUDE) -> None:
    if os.geteuid() != 0:
        raise BackendUnavailableError(
            "building the kernel image without a registry needs root (debootstrap); run it as root, or "
            "build from the Dockerfile where python:3.11-slim-bookworm can be pulled (method='dockerfile')"
        )
    if shutil.which("debootstrap") is None:
        raise BackendUnavailableError("debootstrap is not installed: `apt-get install -y debootstrap`")
    mirror = debian_mirror()
    root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache))
    try:
        _run_step(
            f"debootstrap {DEBIAN_SUITE} from {mirror}",
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(include)}",
                DEBIAN_SUITE,
                str(root),
                mirror,
            ],
            cache / "debootstrap.log",
            console,
        )
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / leftover).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = tarball.with_suffix(".tar.partial")
        _run_step(
            "packing the root file system",
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
            cache / "tar.log",
            console,
        )
        partial.rename(tarball)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def _download_wheels(spec: ImageSpec, cache: Path, dest: Path, console: Console) -> list[Path]:
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
        _run_step("collecting wheels from the cache", [*base_cmd, "--no-index"], log, console)
    except BackendUnavailableError:
        _run_step("downloading wheels (pip download --only-binary=:all:)", base_cmd, log, console)
    wheels = sorted(dest.glob("*.whl"))
    for wheel in wheels:
        if not (store / wheel.name).exists():
            shutil.copy2(wheel, store / wheel.name)
    return wheels


def _docker_build(
    client: Any,
    context: Path,
    name: str,
    spec: ImageSpec,
    buildargs: dict[str, str],
    network: str,
    log: Path,
    console: Console,
    no_cache: bool,
) -> None:
    started = time.perf_counter()
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


def main(argv: list[str] | None = None) -> int:
    """``python -m themisto_env.sandbox.image {build,name,context}``."""
    parser = argparse.ArgumentParser(
        prog="python -m themisto_env.sandbox.image",
        description="Build, name or write the build context of the themisto-env kernel image.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the kernel image unless it exists; print its name")
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument("--method", choices=["debootstrap", "dockerfile"], default="debootstrap")
    sub.add_parser("name", help="print the default kernel image name")
    context = sub.add_parser("context", help="write a docker build context for the default image")
    context.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build_image(force=args.force, method=args.method))
        elif args.command == "name":
            print(default_image())
        else:
            write_context(default_spec(), args.dest)
            print(f"docker build -t {default_image()} {args.dest}")
    except BackendUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
