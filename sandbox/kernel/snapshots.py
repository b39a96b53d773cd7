"""A kernel's snapshots (its ``snapshots`` part): save the user namespace into the store, restore it from
there, and the working folder's files.

`KernelSnapshots` never lets a kernel write the store (`SnapshotStore`): the kernel writes a snapshot into its run
directory's outbox, and the host moves it into the store once its bytes hash to its name. A restore hands the kernel the
store's file (read-only mount) or a copy in its inbox (``store_access="copy"``), and the kernel loads it only if it
hashes to its digest and was written in the kernel's own environment. The working folder (`KernelSnapshots.workdir`) is
the rest of a served state: what files it holds, and setting them from a file store.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from themisto_env.errors import (
    DataError,
    HelperError,
    InfrastructureError,
    KernelDiedError,
    SnapshotCorruptError,
    SnapshotError,
)
from themisto_env.sandbox.kernel.messaging import KernelMessaging
from themisto_env.sandbox.kernel.process import SNAPSHOT_INBOX, SNAPSHOT_OUTBOX, WORKDIR_NAME
from themisto_env.sandbox.models import RestoreResult, SnapshotInfo
from themisto_env.sandbox.store.workdir import FileStore, FileTree, FolderTooLargeError, ScanCache, scan, sync


class KernelSnapshots:
    """A kernel's snapshots and working folder (`kernel.snapshots`), through its messaging part.

    Args:
        messaging: The kernel's messaging part (its process part holds the run directory, the launcher,
            the limits and the store).
        environment: The kernel environment's id: snapshots record it, and only those it wrote restore.
    """

    def __init__(self, messaging: KernelMessaging, environment: str | None) -> None:
        self.messaging = messaging
        self.process = messaging.process
        self.environment = environment
        self._scan_cache: ScanCache = {}  # digests of the working folder's files, by size and times

    def save(self) -> SnapshotInfo:
        """Save the user namespace to the snapshot store (content-addressed); unpicklable names skipped.

        Raises:
            SnapshotError: The namespace could not be saved.
            KernelDiedError: The kernel died meanwhile.
        """
        outbox = self.process.run_dir / SNAPSHOT_OUTBOX
        try:
            info = self.messaging.call("snapshot", store=self.process.launcher.kernel_path(outbox))
        except (InfrastructureError, HelperError) as exc:
            if isinstance(exc, KernelDiedError):
                raise
            raise SnapshotError(f"snapshot failed: {exc}") from exc
        try:
            snapshot = SnapshotInfo(**info)
        except (TypeError, ValueError) as exc:  # the answer names host paths: it must be well-formed
            raise SnapshotError(f"the kernel's snapshot answer is malformed: {exc}") from exc
        self._take_in(outbox / snapshot.digest[:2] / f"{snapshot.digest}.dill", snapshot.digest)
        try:
            self.process.store.note_environment(snapshot.digest, self.environment)
        except OSError as exc:
            raise SnapshotError(f"could not record the environment of snapshot {snapshot.digest[:12]}: {exc}") from exc
        return snapshot

    def _take_in(self, written: Path, digest: str) -> None:
        """Move a snapshot the kernel wrote into the store, once its bytes hash to its name.

        The kernel owns the folder it wrote to: the file is opened without following links, must be a
        regular file no larger than the kernel's memory limit, and only that folder is removed after."""
        outbox = self.process.run_dir / SNAPSHOT_OUTBOX
        try:
            if written.parent.parent != outbox or len(digest) != 64:
                raise SnapshotError(f"the kernel named a snapshot outside its outbox: {written}")
            if self.process.store.path(digest).exists():
                return  # the same state was stored before: content-addressed, nothing to add
            fd = os.open(written, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                limit = self.process.limits.memory_mb * 1024 * 1024
                if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                    raise SnapshotCorruptError(f"the kernel's snapshot {digest[:12]} is not a regular file in bounds")
                data = f.read(limit + 1)
            if hashlib.sha256(data).hexdigest() != digest:
                raise SnapshotCorruptError(f"the kernel wrote a snapshot whose content does not hash to {digest[:12]}")
            self.process.store.add(digest, data)
        except OSError as exc:
            raise SnapshotError(f"could not store snapshot {digest[:12]}: {exc}") from exc
        finally:
            if written.parent.parent == outbox:
                shutil.rmtree(written.parent, ignore_errors=True)

    def restore(self, snapshot: SnapshotInfo | str, *, clean: bool = True, keep: Sequence[str] = ()) -> RestoreResult:
        """Load a snapshot (or digest) into the user namespace; with ``clean`` other user names go, but
        those in ``keep``.

        The kernel reads the file once, checks that its bytes hash to the digest, and loads those bytes:
        a file changed after it was written is never loaded.

        Returns:
            The names restored, and the namespace's fingerprint after the restore.

        Raises:
            SnapshotCorruptError: The file's content does not match its digest (nothing was loaded).
            SnapshotEnvironmentError: A kernel of another environment wrote it (nothing was loaded).
            SnapshotError: The file is missing or could not be loaded (a package it needs is absent, ...).
            InfrastructureError: The kernel failed meanwhile (died, timed out): its namespace is unknown.
        """
        digest = snapshot.digest if isinstance(snapshot, SnapshotInfo) else snapshot
        path = self.process.store.path(digest)
        if not path.exists():
            raise SnapshotError(f"no snapshot {digest[:12]} in {self.process.store.root}")
        self.process.store.check_environment(digest, self.environment)
        handed = self.process.run_dir / SNAPSHOT_INBOX / f"{digest}.dill"
        try:
            if self.process.store_access == "copy":
                shutil.copyfile(path, handed)
                os.chmod(handed, 0o644)
            answer = self.messaging.call(
                "restore",
                path=self.process.launcher.kernel_path(handed if self.process.store_access == "copy" else path),
                digest=digest,
                clean=clean,
                keep=list(keep),
            )
        except OSError as exc:
            raise SnapshotError(f"could not hand snapshot {digest[:12]} to the kernel: {exc}") from exc
        except HelperError as exc:  # dill raised while loading (a missing package, ...): nothing changed
            raise SnapshotError(f"restoring snapshot {digest[:12]} failed: {exc}") from exc
        finally:
            handed.unlink(missing_ok=True)
        if "corrupt" in answer:
            raise SnapshotCorruptError(f"snapshot {path}: {answer['corrupt']}")
        return RestoreResult(names=answer["names"], fingerprint=answer["fingerprint"])

    # -- the working folder -------------------------------------------------------------------------------

    @property
    def workdir(self) -> Path:
        """The kernel's working folder (``RUN_DIR/work``, its current directory on every backend): a private
        copy of the files its cells read by relative path (see `set_files`). What cells write there
        stays there, survives a restart (as on a person's disk) and goes with the kernel."""
        return self.process.run_dir / WORKDIR_NAME

    def files(self) -> FileTree:
        """The working folder's files: relative path -> sha256 (see `themisto_env.sandbox.store.workdir`).

        Raises:
            FolderTooLargeError: They hold more than ``limits.workdir_mb``.
            InfrastructureError: The folder could not be read (a file the kernel made unreadable, ...).
        """
        try:
            return scan(self.workdir, limit_bytes=int(self.process.limits.workdir_mb * 2**20), cache=self._scan_cache)
        except FolderTooLargeError:
            raise
        except DataError as exc:
            raise InfrastructureError(f"could not read the kernel's working folder: {exc}") from exc

    def set_files(self, tree: FileTree, store: FileStore) -> None:
        """Make the working folder hold exactly ``tree``'s files, taken from ``store`` (each checked
        against its digest); only what differs is touched. The kernel should be idle.

        Raises:
            DataError: A file is missing from the store or does not match its digest.
            InfrastructureError: The folder could not be changed (what the kernel wrote there is not the
                host's to remove, ...): a fresh kernel has a folder of its own.
        """
        try:
            sync(self.workdir, tree, store, cache=self._scan_cache)
        except OSError as exc:
            raise InfrastructureError(f"could not set the kernel's working folder: {exc}") from exc
