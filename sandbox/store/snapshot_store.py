"""Content-addressed snapshot files: ``<root>/<digest[:2]>/<digest>.dill``.

Only the host writes the store: a kernel writes a snapshot into its own run directory, and the host
moves it in once its bytes hash to its name (`SnapshotStore.add`), through a temporary file renamed
into place, so the store never holds a partial file. Kernels see the store read-only, or not at all
([`Kernel`][themisto_env.sandbox.Kernel]'s ``store_access``). The same state always has the same
digest, so building a trajectory twice stores each distinct state once.

Beside each snapshot, ``<digest>.env`` names the kernel environments that wrote it (see
`themisto_env.sandbox.environments.location`): a kernel restores only snapshots written in its own environment.
That rule lives here, once (`SnapshotStore.refusal`, `SnapshotStore.check_environment`): the kernel's
restore, the template's state and the state server's choice of a route all ask the store.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from themisto_env.errors import SnapshotEnvironmentError

__all__ = ["DEFAULT_ENVIRONMENT", "SnapshotStore", "default_cache_dir", "environment_label", "write_atomic"]

#: What snapshots written by a kernel of the tool's own Python (no environment) are recorded under.
DEFAULT_ENVIRONMENT = "default"


def environment_label(env_id: str | None) -> str:
    """How snapshots record the environment that wrote them: its id, or ``default``."""
    return env_id or DEFAULT_ENVIRONMENT


def default_cache_dir() -> Path:
    """``$THEMISTO_CACHE``, else ``$XDG_CACHE_HOME/themisto-env``, else ``~/.cache/themisto-env``."""
    if env := os.environ.get("THEMISTO_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "themisto-env"


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a whole or not at all (a temporary file beside it, renamed), readable
    by all (0644: read-only kernels read the store)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class SnapshotStore:
    """A folder of content-addressed snapshot files.

    Args:
        root: The folder; defaults to ``<cache>/snapshots``.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir() / "snapshots"
        self.root.mkdir(parents=True, exist_ok=True)
        legacy = self.root / ".prefixes-1777"
        if legacy.exists():  # kernels wrote here directly before: nobody but its owner writes it now
            for folder in [self.root, *(p for p in self.root.iterdir() if p.is_dir())]:
                with contextlib.suppress(OSError):
                    os.chmod(folder, 0o755)
            with contextlib.suppress(OSError):
                legacy.unlink()

    def path(self, digest: str) -> Path:
        """Where the snapshot with this digest lives."""
        return self.root / digest[:2] / f"{digest}.dill"

    def add(self, digest: str, data: bytes) -> Path:
        """Store snapshot bytes under their digest (the caller checked that they hash to it)."""
        path = self.path(digest)
        if not path.parent.is_dir():
            path.parent.mkdir(exist_ok=True)
            os.chmod(path.parent, 0o755)  # whatever the umask: read-only kernels must traverse it
        write_atomic(path, data)
        return path

    def environments(self, digest: str) -> set[str]:
        """The kernel environments that wrote this snapshot (ids, or ``default`` for the tool's own Python),
        from ``<digest>.env`` beside it; a snapshot without that record was written by the default one."""
        try:
            return set(self.path(digest).with_suffix(".env").read_text().split()) or {DEFAULT_ENVIRONMENT}
        except FileNotFoundError:
            return {DEFAULT_ENVIRONMENT}

    def note_environment(self, digest: str, environment: str | None) -> None:
        """Record that a kernel of ``environment`` (an id; None: the tool's own Python) wrote this snapshot
        (the same bytes may come from two)."""
        label = environment_label(environment)
        path = self.path(digest).with_suffix(".env")
        have = set(path.read_text().split()) if path.exists() else set()
        if label in have:
            return
        write_atomic(path, "".join(f"{e}\n" for e in sorted(have | {label})).encode())

    def refusal(self, digest: str, environment: str | None) -> str | None:
        """Why a kernel of ``environment`` (an id; None: the tool's own Python) must not restore this
        snapshot, in one line, or None when it may: a snapshot restores only in the kernel environment that
        wrote it (other packages, other versions: dill would load another state, or fail half-way)."""
        mine, writers = environment_label(environment), self.environments(digest)
        if mine in writers:
            return None
        return (
            f"snapshot {digest[:12]} was written in kernel environment {', '.join(sorted(writers))}, "
            f"not in this kernel's ({mine}): not restored"
        )

    def check_environment(self, digest: str, environment: str | None) -> None:
        """Raise unless a kernel of ``environment`` may restore this snapshot (see `refusal`).

        Raises:
            SnapshotEnvironmentError: Another kernel environment wrote it.
        """
        refused = self.refusal(digest, environment)
        if refused is not None:
            raise SnapshotEnvironmentError(refused)

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and self.path(digest).exists()

    def __iter__(self) -> Iterator[str]:
        return (p.stem for p in self.root.glob("*/*.dill"))

    def size_bytes(self) -> int:
        """Total size of the stored snapshots."""
        return sum(p.stat().st_size for p in self.root.glob("*/*.dill"))
