"""The Ray actor that owns one kernel on its node: `KernelHost`, driven by
[`RemoteKernel`][themisto_env.sandbox.RemoteKernel] on the owner's side.

Every answer is ``(True, value)`` or ``(False, exception)``: the kernel's own exceptions travel back as
they are, never wrapped by Ray. Snapshots and working-folder contents the owner sends are checked against
their digests before they are kept.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from themisto_env.sandbox.ray.cluster import adopt_owner_variables, import_ray, interruptible_children
from themisto_env.sandbox.store.snapshot_store import default_cache_dir, write_atomic
from themisto_env.sandbox.store.workdir import FileStore, FileTree

__all__ = ["KernelHost"]


Answer = tuple[bool, Any]
"""``(True, value)`` or ``(False, exception)``."""


def _answering(method: Callable[..., Any]) -> Callable[..., Answer]:
    """Make a method answer ``(True, value)`` or ``(False, exception)``: what it raises travels back as it
    is (a full disk as its OSError), never as Ray's wrapped error, and the actor stays up."""

    @functools.wraps(method)
    def answer(self: KernelHost, *args: Any, **kwargs: Any) -> Answer:
        try:
            with interruptible_children():  # a call may start the kernel's process (again)
                return True, method(self, *args, **kwargs)
        except Exception as exc:
            return False, exc

    return answer


class KernelHost:
    """The Ray actor that owns one kernel on its node (see [`RemoteKernel`][themisto_env.sandbox.RemoteKernel], which
    drives it).

    The kernel is made and started by `start` (an error making it, a bad option or an unwritable
    store, comes back typed, as a start failure). Every other answer is `Answer`."""

    def __init__(
        self, backend: str, options: dict[str, Any], files_dir: str | None, variables: dict[str, str | None]
    ) -> None:
        adopt_owner_variables(variables)  # the kernel computes as one started by its owner would
        self.backend = backend
        self.options = options
        self.files = FileStore(files_dir or default_cache_dir() / "ray-files")
        self.kernel: Any = None

    def ready(self) -> Answer:
        """Where this actor runs: ``host:pid`` and the Ray node's id."""
        return True, (f"{os.uname().nodename}:{os.getpid()}", str(import_ray().get_runtime_context().get_node_id()))

    @_answering
    def start(self) -> None:
        """Make the kernel and start its process on this node."""
        from themisto_env.sandbox.kernel.core import Kernel

        if self.kernel is None:
            self.kernel = Kernel(self.backend, **self.options)
        self.kernel.start()

    @_answering
    def invoke(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``kernel.<path>(*args, **kwargs)`` (``path`` may be dotted: ``introspect.list_variables``,
        ``launcher.limit_events``)."""
        return operator.attrgetter(path)(self.kernel)(*args, **kwargs)

    @_answering
    def read(self, path: str) -> Any:
        """The value of ``kernel.<path>`` (an attribute or property)."""
        return operator.attrgetter(path)(self.kernel)

    @_answering
    def missing_snapshots(self, digests: Sequence[str]) -> list[str]:
        """Which of ``digests`` this node's store lacks."""
        return [d for d in digests if d not in self.kernel.store]

    @_answering
    def put_snapshot(self, digest: str, data: bytes, environments: Sequence[str]) -> bool:
        """Keep a snapshot sent by the owner, replacing this node's copy; whether its bytes hash to its digest
        (a damaged copy is not kept)."""
        if hashlib.sha256(data).hexdigest() != digest:
            return False
        self.kernel.store.add(digest, data)
        for environment in environments:
            self.kernel.store.note_environment(digest, environment)
        return True

    @_answering
    def get_snapshot(self, digest: str) -> tuple[bytes, list[str]] | None:
        """A snapshot's bytes and writers, for the owner's store (None: not here)."""
        store = self.kernel.store
        if digest not in store:
            return None
        return store.path(digest).read_bytes(), sorted(store.environments(digest))

    @_answering
    def missing_blobs(self, shas: Sequence[str], owner_root: str) -> list[str]:
        """Which working-folder contents this node lacks, after copying those it can read from the owner's
        file store (a shared folder); a copy is kept only once its bytes hash to its name, and a kept one
        that does not (a copy cut short) is dropped and asked for again."""
        missing = []
        for sha in dict.fromkeys(shas):
            target = self.files.blob_path(sha)
            if _holds(target, sha):
                continue
            try:
                data = FileStore(owner_root).blob_path(sha).read_bytes()
            except OSError:
                data = b""
            if not self._keep(sha, data):
                missing.append(sha)
        return missing

    @_answering
    def put_blobs(self, blobs: Mapping[str, bytes]) -> None:
        """Keep working-folder contents sent by the owner (each checked against its sha256)."""
        for sha, data in blobs.items():
            self._keep(sha, data)

    def _keep(self, sha: str, data: bytes) -> bool:
        if hashlib.sha256(data).hexdigest() != sha:
            return False
        target = self.files.blob_path(sha)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)  # another actor on this node never reads half a file
        return True

    @_answering
    def set_files(self, tree: FileTree) -> None:
        """Set the kernel's working folder from this node's file store."""
        self.kernel.snapshots.set_files(tree, self.files)

    @_answering
    def close(self, graceful: bool) -> None:
        """Close the kernel (its process or container and run directory go)."""
        if self.kernel is not None:
            self.kernel.close(graceful=graceful)


def _holds(path: Any, sha: str) -> bool:
    """Whether ``path`` holds content hashing to ``sha``."""
    try:
        return bool(hashlib.sha256(path.read_bytes()).hexdigest() == sha)
    except OSError:
        return False
