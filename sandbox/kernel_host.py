"""The Ray actor that owns one kernel on its node: :class:`KernelHost`, driven by
:class:`~themisto_env.sandbox.ray_kernel.RemoteKernel` on the owner's side.

Every answer is ``(True, value)`` or ``(False, exception)``: the kernel's own exceptions travel back as
they are, never wrapped by Ray. Snapshots and working-folder contents the owner sends are checked against
their digests before they are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from themisto_env.sandbox.ray_cluster import adopt_owner_variables, import_ray, interruptible_children
from themisto_env.sandbox.snapshots import default_cache_dir, write_atomic
from themisto_env.sandbox.workdir import FileStore, FileTree

__all__ = ["KernelHost"]


class KernelHost:
    """The Ray actor that owns one kernel on its node (see :class:`RemoteKernel`, which drives it).

    Every answer is ``(True, value)`` or ``(False, exception)``: the kernel's own exceptions travel back
    as they are, never as Ray's wrapped errors."""

    def __init__(
        self, backend: str, options: dict[str, Any], files_dir: str | None, variables: dict[str, str | None]
    ) -> None:
        from themisto_env.sandbox.kernel import Kernel

        adopt_owner_variables(variables)  # the kernel computes as one started by its owner would
        self.kernel = Kernel(backend, **options)
        self.files = FileStore(files_dir or default_cache_dir() / "ray-files")

    def ready(self) -> str:
        """Where this actor runs: ``host:pid``."""
        return f"{os.uname().nodename}:{os.getpid()}"

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        return str(import_ray().get_runtime_context().get_node_id())

    def invoke(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """Call ``kernel.<path>(*args, **kwargs)`` (``path`` may be dotted: ``launcher.limit_events``)."""
        try:
            with interruptible_children():  # a call may start the kernel's process again (a restart)
                return True, operator.attrgetter(path)(self.kernel)(*args, **kwargs)
        except Exception as exc:
            return False, exc

    def read(self, path: str) -> tuple[bool, Any]:
        """The value of ``kernel.<path>`` (an attribute or property)."""
        try:
            return True, operator.attrgetter(path)(self.kernel)
        except Exception as exc:
            return False, exc

    def start(self) -> BaseException | None:
        """Start the kernel (its process on this node); None, or why it did not start."""
        try:
            with interruptible_children():
                self.kernel.start()
        except Exception as exc:
            return exc
        return None

    def missing_snapshots(self, digests: Sequence[str]) -> list[str]:
        """Which of ``digests`` this node's store lacks."""
        return [d for d in digests if d not in self.kernel.store]

    def put_snapshot(self, digest: str, data: bytes, environments: Sequence[str]) -> None:
        """Keep a snapshot sent by the owner (checked against its digest first)."""
        if hashlib.sha256(data).hexdigest() != digest:
            return  # a damaged copy is not kept: the restore then says the snapshot is missing
        self.kernel.store.add(digest, data)
        for environment in environments:
            self.kernel.store.note_environment(digest, environment)

    def get_snapshot(self, digest: str) -> tuple[bytes, list[str]] | None:
        """A snapshot's bytes and writers, for the owner's store (None: not here)."""
        store = self.kernel.store
        if digest not in store:
            return None
        return store.path(digest).read_bytes(), sorted(store.environments(digest))

    def missing_blobs(self, shas: Sequence[str], owner_root: str) -> list[str]:
        """Which working-folder contents this node lacks, after copying those it can read from the owner's
        file store (a shared folder)."""
        missing = []
        for sha in dict.fromkeys(shas):
            target = self.files.blob_path(sha)
            if target.exists():
                continue
            source = FileStore(owner_root).blob_path(sha)
            with contextlib.suppress(OSError):
                if source.is_file():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target)
                    continue
            missing.append(sha)
        return missing

    def put_blobs(self, blobs: Mapping[str, bytes]) -> None:
        """Keep working-folder contents sent by the owner (each checked against its sha256)."""
        for sha, data in blobs.items():
            if hashlib.sha256(data).hexdigest() == sha:
                target = self.files.blob_path(sha)
                target.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(target, data)

    def set_files(self, tree: FileTree) -> tuple[bool, Any]:
        """Set the kernel's working folder from this node's file store."""
        return self.invoke("set_files", (tree, self.files), {})

    def close(self, graceful: bool) -> None:
        """Close the kernel (its process or container and run directory go)."""
        self.kernel.close(graceful=graceful)
