"""The debootstrap root: the kernel image's base, a minimal Debian made with no registry at all.

`ensure_base` makes (once) the base image ``themisto-kernel-base:<suite>-<key>``: ``debootstrap
--variant=minbase`` of Debian's ``bookworm`` with Python and the requested Debian packages, packed into a
tarball (cached, see `cache_dir`) and ``docker import``-ed. The Debian
mirror is the one apt uses on this host (`debian_mirror`). Needs root and ``debootstrap``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.engine import image_exists
from themisto_env.sandbox.image.spec import DEBIAN_SUITE

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["BASE_REPOSITORY", "DEBOOTSTRAP_INCLUDE", "DEFAULT_MIRROR", "debian_mirror", "ensure_base", "run_step"]

#: Repository part of the imported debootstrap base image.
BASE_REPOSITORY = "themisto-kernel-base"
#: Debian packages of the debootstrap base.
DEBOOTSTRAP_INCLUDE: tuple[str, ...] = ("python3", "python3-venv")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


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


def run_step(what: str, cmd: list[str], log: Path, console: Console, **kwargs: Any) -> None:
    """Run one build step with a spinner, its output in ``log``; raise with the log's tail on failure."""
    started = time.perf_counter()
    with console.status(f"{what}…"), open(log, "wb") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False, **kwargs)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BackendUnavailableError(f"image build failed while {what} (exit {proc.returncode}); log: {log}\n{tail}")
    console.print(f"[green]✓[/] {what} ({time.perf_counter() - started:.1f} s)")


def ensure_base(client: Any, cache: Path, console: Console, *, include: tuple[str, ...] = DEBOOTSTRAP_INCLUDE) -> str:
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
        run_step(
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
        run_step(
            "packing the root file system",
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
            cache / "tar.log",
            console,
        )
        partial.rename(tarball)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)
