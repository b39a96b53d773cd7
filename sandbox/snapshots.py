"""Content-addressed snapshot files: ``<root>/<digest[:2]>/<digest>.dill``.

Snapshots are written by the kernel itself (so a container writes into a bind-mounted store), to a
temporary file renamed into place, so the store never holds a partial file. The same state always has
the same digest, so building a trajectory twice stores each distinct state once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def default_cache_dir() -> Path:
    """``$THEMISTO_CACHE``, else ``$XDG_CACHE_HOME/themisto-env``, else ``~/.cache/themisto-env``."""
    if env := os.environ.get("THEMISTO_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "themisto-env"


class SnapshotStore:
    """A folder of content-addressed snapshot files.

    Args:
        root: The folder; defaults to ``<cache>/snapshots``. It is made world-writable (sticky, like
            /tmp) so that a container's non-root kernel can write into it.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir() / "snapshots"
        self.root.mkdir(parents=True, exist_ok=True)
        # Kernels of any user write here (a root local kernel, a uid-1000 container): the root and its
        # 256 prefix folders are made world-writable with the sticky bit, like /tmp, once.
        marker = self.root / ".prefixes-1777"
        if not marker.exists():
            for folder in [self.root, *(self.root / f"{i:02x}" for i in range(256))]:
                folder.mkdir(exist_ok=True)
                with contextlib.suppress(PermissionError):
                    os.chmod(folder, 0o1777)
            with contextlib.suppress(PermissionError):
                marker.touch()

    def path(self, digest: str) -> Path:
        """Where the snapshot with this digest lives."""
        return self.root / digest[:2] / f"{digest}.dill"

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and self.path(digest).exists()

    def __iter__(self) -> Iterator[str]:
        return (p.stem for p in self.root.glob("*/*.dill"))

    def size_bytes(self) -> int:
        """Total size of the stored snapshots."""
        return sum(p.stat().st_size for p in self.root.glob("*/*.dill"))
