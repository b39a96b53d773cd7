"""The kernel image's package set and name: `ImageSpec`, the default spec, and its build context.

The image is named ``themisto-kernel:<tag>``, where the tag is a hash of the package set and of the
recipe (``image/Dockerfile``): a changed package set is a new image, never a stale one. The default
package set is the *host's* exact versions of `DEFAULT_PACKAGES` and of everything they depend on,
because a dill snapshot only loads under the versions that wrote it. `write_context` writes a
``docker build`` context for a spec (the Dockerfile, requirements, constraints and wheels).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.errors import BackendUnavailableError

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
#: installed, and a snapshot holding such strings loads only where pyarrow is installed too; pandas
#: imports pytz when it is installed, and a snapshot records every package its kernel had imported.
OPTIONAL_PACKAGES: tuple[str, ...] = ("pyarrow", "pytz")
#: Repository part of the kernel image name.
IMAGE_REPOSITORY = "themisto-kernel"
#: Debian release of the image, and its Python (the wheels must match it).
DEBIAN_SUITE = "bookworm"
DEBIAN_PYTHON = "3.11"
#: Bump when the build changes in a way the Dockerfile's text does not show.
RECIPE_VERSION = "1"


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
        walked: set[tuple[str, str]] = set()
        # (package, extra): a requirement such as `fastmcp-slim[client]` brings what that extra requires too
        stack = [(n, "") for n in roots]
        while stack:
            name, extra = stack.pop()
            if (name, extra) in walked:
                continue
            walked.add((name, extra))
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
                if req.marker is None or req.marker.evaluate({"extra": extra}):
                    dep = canonicalize_name(req.name)
                    stack += [(dep, ""), *((dep, canonicalize_name(e)) for e in req.extras)]
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
    """The host-pinned spec of `DEFAULT_PACKAGES`, and of those `OPTIONAL_PACKAGES` the host
    has (computed once per process)."""
    return ImageSpec.from_host([*DEFAULT_PACKAGES, *(n for n in OPTIONAL_PACKAGES if _distribution(n) is not None)])


@functools.cache
def package_set_digest() -> str:
    """A digest of this Python's kernel package set (`default_spec`'s pins: every installed package the
    kernel's packages need, at its version), the same in the kernel image built from it. A dataset replayed
    here is kept under it (its snapshots load only under those versions); ``unpinned`` where the kernel's
    packages are not all installed."""
    try:
        spec = default_spec()
    except BackendUnavailableError:
        return "unpinned"
    payload = json.dumps({"packages": sorted(spec.packages), "constraints": sorted(spec.constraints)})
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def default_image() -> str:
    """Name of the default kernel image, e.g. ``themisto-kernel:3f2a9c01b7de``."""
    return default_spec().image_name


@functools.cache
def dockerfile_text() -> str:
    """The shipped ``image/Dockerfile``."""
    return (importlib.resources.files("themisto_env.sandbox.image") / "Dockerfile").read_text()


def cache_dir() -> Path:
    """Where wheels and the debootstrap tarball are kept: ``$THEMISTO_CACHE/image`` if set, else
    ``$XDG_CACHE_HOME/themisto-env/image`` (``~/.cache/themisto-env/image``)."""
    if root := os.environ.get("THEMISTO_CACHE"):
        return Path(root).expanduser() / "image"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "themisto-env" / "image"


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
