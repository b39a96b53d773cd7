"""The process side of a kernel: how it is started, watched, signalled and stopped.

A [`KernelLauncher`][themisto_env.sandbox.KernelLauncher] owns one kernel *process* (a local subprocess, a container,
...). Messaging with the kernel is the same for every backend and lives in
[`themisto_env.sandbox.kernel.core.Kernel`][themisto_env.sandbox.Kernel], which drives a launcher. A launcher is
reusable: ``start`` may be called again after ``stop`` (that is how a kernel restarts). Backends are named in
    `BACKENDS`.
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from themisto_env.errors import ConfigError, did_you_mean
from themisto_env.sandbox.models import SandboxLimits


class KernelLauncher(ABC):
    """Starts and stops one kernel process.

    Attributes:
        name: Registered backend name (``local``, ``docker``, ...).
        isolated: Whether the kernel is isolated from the host (own user, no network, read-only root).
        enforces_limits: Whether memory, CPU and process limits of ``SandboxLimits`` are enforced.
        hides_host_files: Whether the kernel sees only what it is given (not the host's files: the
            dataset with its targets, the snapshot store, the user's home). Model-written code belongs
            on such a backend.
    """

    name: ClassVar[str]
    isolated: ClassVar[bool]
    enforces_limits: ClassVar[bool] = False
    hides_host_files: ClassVar[bool] = False
    #: Host directories the kernel must not see at all (the snapshot store of a kernel that gets snapshots
    #: by copy), set before ``start``. A backend that shows host files (bwrap) covers them; one that shows
    #: only what it mounts (docker) has nothing to do.
    hidden_dirs: tuple[Path, ...] = ()

    def __init__(
        self, limits: SandboxLimits, shared_dirs: tuple[Path, ...] = (), readonly_dirs: tuple[Path, ...] = ()
    ) -> None:
        """Args:
        limits: Limits to apply where the backend can.
        shared_dirs: Host directories the kernel must be able to read and write at the same path
            (the kernel's run directory).
        readonly_dirs: Host directories the kernel may read but never write (the snapshot store),
            where the backend can enforce it.
        """
        self.limits = limits
        self.shared_dirs = shared_dirs
        self.readonly_dirs = readonly_dirs

    @abstractmethod
    def start(self, connection_file: Path, workdir: Path) -> None:
        """Start the kernel process with this connection file and working directory; return at once."""

    @abstractmethod
    def is_alive(self) -> bool:
        """Whether the kernel process is still running (cheap: called while waiting for replies)."""

    @abstractmethod
    def exit_reason(self) -> str:
        """Why the process is gone (exit code, signal, OOM kill), for error messages."""

    @abstractmethod
    def interrupt(self) -> None:
        """Send SIGINT to the kernel process."""

    @abstractmethod
    def stop(self, *, graceful: bool = True) -> str:
        """Stop the process and free what it holds; return the path taken ("exited", "terminated",
        "killed", "lost"). Idempotent."""

    def kernel_path(self, host_path: Path) -> str:
        """Where a path inside one of ``shared_dirs`` or ``readonly_dirs`` is seen by the kernel (the same
        path by default)."""
        return str(host_path)

    def pid(self) -> int | None:
        """The kernel's process id as seen from the host, if it can be read."""
        return None

    def check_backend(self) -> None:
        """Raise [`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] when the backend itself is
        gone (before a dead kernel is blamed on the code it ran). Nothing to check for a local process."""
        return None

    def out_of_memory(self) -> bool:
        """Whether the backend saw the kernel killed at its memory limit (from its own records, never
        from what the kernel printed)."""
        return False

    def limit_events(self) -> dict[str, int]:
        """How often the kernel hit its limits so far, read from outside the kernel where the backend
        can: ``oom_kill`` (processes killed at the memory limit), ``pids_max`` (forks refused at the
        process limit); a forked copy with a uid of its own infers ``data_limit`` (its data near its
        allowance) and adds its template container's as ``shared_oom_kill`` and ``shared_pids_max``. Empty
        where the backend enforces no limits."""
        return {}

    def memory_bytes(self) -> int | None:
        """Resident memory of the kernel process, read from the host's /proc; None if unknown."""
        pid = self.pid()
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None

    def owner_record(self) -> dict[str, list[Any]]:
        """What must go if the owning process dies, for the run directory's owner record
        (`themisto_env.sandbox.lifetime.reaper`): ``processes`` (host pid and start time, each the leader
        of its process group) and ``containers`` (ids)."""
        return {"processes": [], "containers": []}

    @classmethod
    def cleanup_stale(cls, *, dry_run: bool = False) -> list[str]:
        """Remove what dead host processes left behind (containers, ...); return what was removed (with
        ``dry_run``: what would be)."""
        return []


#: Environment every kernel starts with, on every backend: a fixed hash seed makes the iteration order of
#: sets of strings (and so their reprs and outputs) the same in every kernel, so replays, snapshots and
#: observations of a state do not depend on the process.
KERNEL_ENVIRONMENT: dict[str, str] = {"PYTHONHASHSEED": "0"}

#: Backend name -> "module:Class" of its launcher, imported only when used.
BACKENDS: dict[str, str] = {
    "local": "themisto_env.sandbox.backends.local:LocalLauncher",
    "bwrap": "themisto_env.sandbox.backends.local:BwrapLauncher",
    "docker": "themisto_env.sandbox.backends.docker:DockerLauncher",
}


def launcher_class(backend: str) -> type[KernelLauncher]:
    """The launcher class registered for a backend name.

    Raises:
        ConfigError: The name is unknown (the message suggests the nearest one).
    """
    if backend not in BACKENDS:
        hint = did_you_mean(backend, BACKENDS, listed=False)
        raise ConfigError(f"unknown sandbox backend {backend!r}{hint} (known: {', '.join(BACKENDS)})")
    module_name, _, class_name = BACKENDS[backend].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls  # type: ignore[no-any-return]
