"""The parts of a kernel in a Ray actor (`RemoteKernel.snapshots`, `RemoteKernel.introspect`): each forwards
its calls over the actor to the kernel's own part on its node, and brings the answers back as they are.

They reach the actor through `ActorCalls`, what `themisto_env.sandbox.ray.kernel.RemoteKernel` offers its
parts (the kernel is not imported here: it imports its parts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from themisto_env.errors import SnapshotCorruptError, SnapshotError
from themisto_env.sandbox.kernel.contract import MEASURE_TIMEOUT_S, IntrospectionLike
from themisto_env.sandbox.models import RestoreResult, SnapshotInfo
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.store.workdir import FileStore, FileTree

__all__ = ["ActorCalls", "RemoteIntrospection", "RemoteSnapshots"]


class ActorCalls(Protocol):
    """What a remote kernel's parts use of it: the owner's store and the kernel's environment, and calls to
    its actor (`KernelHost`), which raise what the kernel raised there."""

    @property
    def store(self) -> SnapshotStore:
        """The owner's snapshot store."""
        ...

    @property
    def environment(self) -> str | None:
        """The kernel environment's id."""
        ...

    def _call(self, method: str, *args: Any, wait_s: float | None = None, during: str = "") -> Any:
        """Call a method of the actor."""
        ...

    def _invoke(self, path: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``kernel.<path>(...)`` in the actor."""
        ...

    def _read(self, path: str) -> Any:
        """Read ``kernel.<path>`` in the actor."""
        ...


class RemoteSnapshots:
    """A remote kernel's snapshots (`SnapshotsLike`): the owner's store holds the truth, the node's a copy.

    A snapshot the node lacks is sent with the restore that needs it; one the kernel writes is fetched into
    the owner's store. Working-folder contents are sent blob by blob the same way.
    """

    def __init__(self, kernel: ActorCalls) -> None:
        self._kernel = kernel

    @property
    def workdir(self) -> Path:
        """The kernel's working folder, on its node."""
        return Path(self._kernel._read("snapshots.workdir"))

    def files(self) -> FileTree:
        """The working folder's files on the kernel's node: relative path -> sha256."""
        return dict(self._kernel._invoke("snapshots.files"))

    def save(self) -> SnapshotInfo:
        """Save the namespace to the node's store, and bring the snapshot to the owner's store (recording,
        as a local kernel does, that this kernel's environment wrote it)."""
        store = self._kernel.store
        info: SnapshotInfo = self._kernel._invoke("snapshots.save")
        if info.digest not in store:
            found = self._kernel._call("get_snapshot", info.digest, during="snapshot")
            if found is not None:
                store.add(info.digest, found[0])
        try:
            store.note_environment(info.digest, self._kernel.environment)
        except OSError as exc:
            raise SnapshotError(f"could not record the environment of snapshot {info.digest[:12]}: {exc}") from exc
        return info

    def restore(self, snapshot: SnapshotInfo | str, *, clean: bool = True, keep: Sequence[str] = ()) -> RestoreResult:
        """Restore a snapshot of the owner's store, sent to the node first if it lacks it.

        Raises:
            SnapshotCorruptError: The owner's copy does not hash to its digest (set it aside, as for a local
                kernel). A node's copy found damaged is replaced by the owner's and the restore tried again.
            SnapshotError: And the rest of what `KernelSnapshots.restore` raises.
        """
        digest = snapshot.digest if isinstance(snapshot, SnapshotInfo) else snapshot
        if self._kernel._call("missing_snapshots", [digest], during="restore"):
            self._send(digest)
        try:
            restored: RestoreResult = self._kernel._invoke("snapshots.restore", digest, clean=clean, keep=keep)
        except SnapshotCorruptError:
            if self._send(digest) is not None:
                raise
            # the node's copy was damaged: replaced by the owner's
            restored = self._kernel._invoke("snapshots.restore", digest, clean=clean, keep=keep)
        return restored

    def _send(self, digest: str) -> str | None:
        """Send the owner's copy of a snapshot to the node; None, or why it was not sent (the owner lacks
        it: the restore then says so). A copy that does not hash to its digest is the owner's damage.

        Raises:
            SnapshotCorruptError: The owner's copy is damaged.
        """
        store = self._kernel.store
        if digest not in store:
            return "missing"
        try:
            data = store.path(digest).read_bytes()
        except OSError:
            return "unreadable"
        if hashlib.sha256(data).hexdigest() != digest:
            raise SnapshotCorruptError(f"snapshot {store.path(digest)}: its content does not hash to its name")
        self._kernel._call("put_snapshot", digest, data, sorted(store.environments(digest)), during="restore")
        return None

    def set_files(self, tree: FileTree, store: FileStore) -> None:
        """Make the working folder hold ``tree``'s files, sending the node the contents it lacks (files the
        kernel writes stay on its node: their digests are compared, as for a local kernel)."""
        owner_root = str(Path(store.root).resolve())
        missing = self._kernel._call("missing_blobs", sorted(tree.values()), owner_root, during="set_files")
        if missing:
            names = {sha: path for path, sha in tree.items()}
            self._kernel._call(
                "put_blobs", {sha: store.read(sha, name=names[sha]) for sha in missing}, during="set_files"
            )
        self._kernel._call("set_files", tree, during="set_files")


class RemoteIntrospection(IntrospectionLike):
    """A remote kernel's introspection (`IntrospectionLike`): each question goes to the kernel's
    ``introspect`` part on its node (the typed ones through `ask`) and its answer (or exception) comes back
    as it is; a ``timeout_s`` travels with the call."""

    def __init__(self, kernel: ActorCalls) -> None:
        self._kernel = kernel

    def _ask(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        return self._kernel._invoke(f"introspect.{method}", *args, **kwargs)

    def ask(self, call: str, /, **args: Any) -> Any:
        return self._ask("ask", call, **args)

    def variable_sizes(self) -> dict[str, int]:
        return dict(self._ask("variable_sizes"))

    def fingerprint(self) -> dict[str, str]:
        return dict(self._ask("fingerprint"))

    def package_versions(self, names: Sequence[str]) -> dict[str, str]:
        return dict(self._ask("package_versions", names))

    def loaded_distributions(self) -> dict[str, str]:
        return dict(self._ask("loaded_distributions"))

    def preload(self, modules: Sequence[str]) -> None:
        self._ask("preload", modules)

    def seal(self) -> str:
        return str(self._ask("seal"))

    def sealed_fingerprint(
        self, token: str, canary: dict[str, object], *, timeout_s: float = MEASURE_TIMEOUT_S
    ) -> dict[str, str]:
        return dict(self._ask("sealed_fingerprint", token, canary, timeout_s=timeout_s))
