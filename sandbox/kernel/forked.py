"""The process side of a kernel forked from a kernel template (`themisto_env.sandbox.template.core`).

A forked kernel is its template's child, not its owner's: `ForkLauncher` watches and signals it
through a pidfd the template sent (no race against pid reuse), and asks the template for its exit status.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
from pathlib import Path
from typing import Any, ClassVar, Protocol

from themisto_env.errors import InfrastructureError, KernelStartError, TemplateGoneError
from themisto_env.sandbox.kernel.copy_namespaces import namespace_limit_events
from themisto_env.sandbox.kernel.copy_uid import CopyIdentity
from themisto_env.sandbox.kernel.launcher import KernelLauncher, launcher_class
from themisto_env.sandbox.lifetime.owners import process_record
from themisto_env.sandbox.models import SandboxLimits

__all__ = ["SHARED", "ForkLauncher", "ForkSource", "exited", "fork_launcher_class", "shared_fault"]


class ForkSource(Protocol):
    """What a forked kernel needs of its template ([`KernelTemplate`][themisto_env.sandbox.KernelTemplate])."""

    @property
    def base(self) -> ForkSource | None:
        """The template a state template was made from (None for a template itself)."""

    @property
    def kernels_dir(self) -> Path:
        """Where the forked kernels' run directories go."""

    def fork(
        self,
        connection_file: Path,
        workdir: Path,
        log: Path,
        *,
        identity: CopyIdentity | None = None,
        limits: SandboxLimits | None = None,
    ) -> tuple[int, int]:
        """Fork a kernel; its pid in the template's namespace and a pidfd of it."""

    def request(self, request: dict[str, Any], *, timeout_s: float = ...) -> dict[str, Any]:
        """One request to the template process."""

    def is_alive(self) -> bool:
        """Whether the template process runs."""

    def identity_for(self, connection_file: Path) -> CopyIdentity | None:
        """The identity the kernel forked on this connection file took (None: its template's)."""

    @property
    def isolates_copies(self) -> bool:
        """Whether the kernels it forks isolate themselves in namespaces of their own (a ``bwrap`` template of
        model-written code), with rlimits of their own."""

    def limit_events(self) -> dict[str, int]:
        """The limit hits of the template's own sandbox, shared by every copy in it (a docker template's
        container cgroup: ``oom_kill``, ``pids_max``); empty where there is none."""


def exited(pidfd: int, timeout_s: float = 0.0) -> bool:
    """Whether the process behind a pidfd has exited (a pidfd polls readable then), waiting up to ``timeout_s``.

    ``poll``, not ``select``: ``select`` refuses descriptors from 1024 up (``FD_SETSIZE``), and a server with
    a hundred sessions open holds more than a thousand: every kernel forked after that read as exited during
    its start."""
    poller = select.poll()
    try:
        poller.register(pidfd, select.POLLIN)
        events = poller.poll(int(timeout_s * 1000))
    except (OSError, ValueError):
        return True
    return bool(events)


def _host_pid(pidfd: int) -> int | None:
    """The pid, as this process sees it, of the process behind a pidfd (``/proc/self/fdinfo``)."""
    try:
        for line in Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines():
            if line.startswith("Pid:"):
                pid = int(line.split()[1])
                return pid if pid > 0 else None
    except (OSError, ValueError, IndexError):
        return None
    return None


class ForkLauncher(KernelLauncher):
    """The process side of a kernel forked from a [`KernelTemplate`][themisto_env.sandbox.KernelTemplate] (same contract
    as a started one).

    The kernel is the template's child, not this process's: it is watched and signalled through a pidfd,
    and its exit status comes from the template that reaped it. Restarting forks a fresh kernel from the
    template's base (an empty state), as a restart of a started kernel starts an empty one.
    """

    name: ClassVar[str] = "fork"
    isolated: ClassVar[bool] = False

    #: The template installed the in-kernel helper before forking: the kernel has it from the start.
    helper_installed: ClassVar[bool] = True

    def __init__(self, *args: Any, template: ForkSource, environment: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the environment is the template's
        self.template = template
        self._pidfd: int | None = None
        self._pid: int | None = None  # in the template's namespace
        self._host_pid: int | None = None
        self._started = 0
        #: The copy's own uid and limits, where copies take one (docker); None: the template's identity.
        self.identity: CopyIdentity | None = None
        #: Whether the copy isolates itself in namespaces of its own with its own rlimits (bwrap's copies of
        #: model-written code): its limits are enforced, and their hits read from ``/proc``.
        self.own_namespaces = bool(getattr(template, "isolates_copies", False))
        if self.own_namespaces:
            self.enforces_limits = True  # type: ignore[misc]

    def start(self, connection_file: Path, workdir: Path) -> None:
        template = self.template
        if self._started and template.base is not None:  # a restart: an empty kernel, from the base
            template = template.base
        self._started += 1
        try:
            log = connection_file.parent / "kernel.log"
            self._pid, self._pidfd = template.fork(  # a restart keeps the copy's uid: its files stay its own
                connection_file, workdir, log, identity=self.identity, limits=self.limits
            )
        except TemplateGoneError as exc:
            raise KernelStartError(f"could not fork a kernel: {exc}") from exc
        self._host_pid = _host_pid(self._pidfd)
        self.identity = template.identity_for(connection_file)

    def is_alive(self) -> bool:
        return self._pidfd is not None and not exited(self._pidfd)

    def exit_reason(self) -> str:
        if self._pidfd is None:
            return "never started"
        if not exited(self._pidfd):
            return "still running"
        for template in (self.template, self.template.base):
            if template is None:
                continue
            with contextlib.suppress(InfrastructureError):
                status = template.request({"op": "status", "pid": self._pid}, timeout_s=2.0).get("exit_status")
                if status is not None:
                    code = os.waitstatus_to_exitcode(status)
                    return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        if not self.template.is_alive():
            return "its kernel template is gone"
        return "exited"

    def pid(self) -> int | None:
        return self._host_pid if self.is_alive() else None

    def owner_record(self) -> dict[str, list[Any]]:
        if self._host_pid is None:
            return super().owner_record()
        return {"processes": [process_record(self._host_pid)], "containers": []}

    def interrupt(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError, OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGINT)

    def stop(self, *, graceful: bool = True) -> str:
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is None:
            return "exited"
        try:
            if exited(pidfd):
                path = "exited"
            else:
                path = "killed"
                if graceful:
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
                    path = "terminated" if exited(pidfd, 2.0) else "killed"
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            # what the kernel started (its session's group) goes too; the group id stays reserved while a member lives
            if self._host_pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._host_pid, signal.SIGKILL)
            self._reap_identity()
            return path
        finally:
            os.close(pidfd)

    def _reap_identity(self) -> None:
        """Where the copy had a uid of its own: everything of that uid goes (daemons that left its session
        included) and its files in the container's shared ``/tmp`` and ``/dev/shm``; the template does it
        (under the copy's uid). A template that is gone took them along."""
        if self.identity is None:
            return
        for template in (self.template, self.template.base):
            if template is not None and template.is_alive():
                with contextlib.suppress(InfrastructureError):
                    template.request({"op": "reap", "uid": self.identity.uid}, timeout_s=10.0)
                    break
        # and from the host, which sees the uid's processes: what the template's reap could not end (its
        # reap child stopped by the copy's own processes, say) goes too
        self.identity.end_processes()

    def limit_events(self) -> dict[str, int]:
        """Where the copy has a uid of its own: its own limit hits, read from ``/proc`` (see
        `CopyIdentity.limit_events`), and the hits of the container it shares with its template and
        siblings, as ``shared_oom_kill`` and ``shared_pids_max`` (its cgroup counts those of every copy
        together: a rise while the copy's code ran, without a hit of its own, means the container ran out,
        not the copy: an infrastructure fault, see `shared_fault`). Where the copy isolates itself in namespaces
        of its own (bwrap): its own hits, read from ``/proc`` through its keeper (see
        `namespace_limit_events`; a bwrap sandbox has no cgroup to share)."""
        if self.own_namespaces and self._host_pid is not None:
            return namespace_limit_events(self._host_pid, self.limits.pids)
        if self.identity is None:
            return {}
        events = self.identity.limit_events(self._host_pid)
        with contextlib.suppress(Exception):  # the container may be gone
            events.update({f"{SHARED}{key}": value for key, value in self.template.limit_events().items()})
        return events


#: The prefix of the limit events of the container a copy shares (``shared_oom_kill``, ``shared_pids_max``).
SHARED = "shared_"


def shared_fault(seen: dict[str, int]) -> str | None:
    """Why a forked copy's run is not its code's to answer for, from the limit hits seen while it ran (what
    `ForkLauncher.limit_events` counted beyond its value before): the container it shares ran out of memory
    (a process killed by the container's OOM killer) or of processes (a fork or thread refused at the
    container's ``pids.max``), while the copy stayed within its own process limit. None otherwise: a copy
    at its own ``RLIMIT_NPROC`` (``pids_max``) failed by its own doing, whatever the container did meanwhile.

    A copy's own memory allowance (``RLIMIT_DATA``) fails its code with a ``MemoryError``, never with a
    kill: a copy killed while the container's OOM killer ran was killed for the container's sake."""
    if seen.get("pids_max"):
        return None
    causes = []
    if seen.get(f"{SHARED}oom_kill"):
        causes.append(f"out of memory ({seen[SHARED + 'oom_kill']} process(es) killed by its OOM killer)")
    if seen.get(f"{SHARED}pids_max"):
        causes.append(f"out of processes ({seen[SHARED + 'pids_max']} fork(s) refused at its pids limit)")
    if not causes:
        return None
    return f"the container this copy shares with others ran {' and '.join(causes)} while its code ran"


@functools.cache
def fork_launcher_class(backend: str) -> type[ForkLauncher]:
    """The fork launcher for a backend's template: the backend's name and isolation, forked kernels."""
    base = launcher_class(backend)
    return type(
        f"{backend.capitalize()}ForkLauncher",
        (ForkLauncher,),
        {
            "name": base.name,
            "isolated": base.isolated,
            "enforces_limits": base.enforces_limits,
            "hides_host_files": base.hides_host_files,
        },
    )
