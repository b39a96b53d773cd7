"""The ``docker`` backend: each kernel in its own container, with no network and hard limits.

The container (`kernel_container_options`; DESIGN.md section 5) runs as uid 1000 without capabilities, on
a read-only root with a ``/tmp`` tmpfs. The kernel talks to the host over IPC sockets in its run directory,
bind-mounted at the same path inside and out; the snapshot store, when the kernel may see it, is mounted
read-only under ``/mnt`` (the kernel writes snapshots into its run directory; the host checks and moves
them). The docker SDK is imported only when a launcher is used.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from pathlib import Path
from typing import Any, ClassVar

from themisto_env.errors import BackendUnavailableError, KernelStartError
from themisto_env.sandbox.backends.containers import (
    cgroup_limit_events,
    container_labels,
    container_name,
    grant_kernel_access,
    host_children,
    host_cmdline,
    kernel_container_options,
    last_log_line,
    remove_stale_containers,
    signal_name,
)
from themisto_env.sandbox.engine import docker_client, engine, image_exists, unreachable
from themisto_env.sandbox.environments.location import environment_image
from themisto_env.sandbox.image.spec import default_image
from themisto_env.sandbox.kernel.launcher import KernelLauncher
from themisto_env.sandbox.lifetime.leftovers import engine_unreachable
from themisto_env.sandbox.lifetime.owners import process_start
from themisto_env.sandbox.models import SandboxLimits

__all__ = ["DockerLauncher"]
#: Where shared dirs other than the run dir are mounted inside the container.
SHARED_MOUNT_ROOT = "/mnt/themisto"
#: Seconds a SIGTERM'd kernel gets to exit before the container is killed (graceful stop).
TERM_GRACE_S = 2.0
#: Without a host pid to watch, the engine is asked about the container at most this often.
RELOAD_INTERVAL_S = 0.5
#: How long the container's first process may show another command line than docker-init's (runc's init,
#: before its exec) before its pid is taken for one of another pid namespace.
INIT_EXEC_GRACE_S = 5.0


def _remove_quietly(client: Any, container_id: str) -> None:
    """Finalizer: remove a container whose launcher was dropped without ``stop``."""
    with contextlib.suppress(Exception):
        client.api.remove_container(container_id, force=True)


class DockerLauncher(KernelLauncher):
    """One ipykernel per container (docker SDK).

    Args:
        limits: ``memory_mb`` (swap is not allowed beyond it), ``cpus`` and ``pids`` become container
            limits.
        shared_dirs: Host directories bind-mounted read-write (the run dir, at the same path).
        readonly_dirs: Host directories bind-mounted read-only (the snapshot store, under /mnt).
        image: The kernel image; default `default_image` (``themisto-kernel:<tag>`` of the host's
            package set).
        environment: A kernel environment's id (``themisto kernel-env create --docker``): its image
            (``themisto-kernel-env:<id>``) unless ``image`` is given.
    """

    name: ClassVar[str] = "docker"
    isolated: ClassVar[bool] = True
    hides_host_files: ClassVar[bool] = True
    _stale_checked: ClassVar[bool] = False  # cleanup_stale() ran in this process
    enforces_limits: ClassVar[bool] = True

    def __init__(
        self,
        limits: SandboxLimits,
        shared_dirs: tuple[Path, ...] = (),
        readonly_dirs: tuple[Path, ...] = (),
        *,
        image: str | None = None,
        environment: str | None = None,
    ) -> None:
        super().__init__(limits, shared_dirs, readonly_dirs)
        self.environment_id = environment
        self.image = image or (environment_image(environment) if environment is not None else None)
        self._client: Any = None
        self._image_checked = False
        self._container: Any = None
        self._init_pid: int | None = None  # host pid of the container's init (tini), if visible
        self._init_start: str | None = None
        self._init_hidden = False
        self._init_mismatch_since: float | None = None
        self._connection_file = ""
        self._kernel_pid: int | None = None
        self._last_reload = 0.0
        self._finalizer: weakref.finalize | None = None
        self._last_stop = "exited"
        self.container_name: str | None = None

    # -- engine ----------------------------------------------------------------------------------

    def _docker(self) -> Any:
        """The docker client, after checking that the engine answers and the image exists."""
        if self._client is None:
            self._client = docker_client()
        if not self._image_checked:
            self.image = self.image or default_image()
            with engine(self._client):
                exists = image_exists(self._client, self.image)
            if not exists:
                raise BackendUnavailableError(f"the kernel image {self.image} is missing: {self._image_fix()}")
            self._image_checked = True
        return self._client

    def _image_fix(self) -> str:
        """How to make the missing kernel image."""
        if self.environment_id is not None:
            return (
                f"build kernel environment {self.environment_id}'s image with `themisto kernel-env create NAME "
                "--requirements FILE --docker` (`themisto kernel-env list` names it)"
            )
        return "build it with `themisto sandbox build-image` (or `python -m themisto_env.sandbox.image build`)"

    # -- lifecycle -------------------------------------------------------------------------------

    def mounts(self, connection_file: Path, workdir: Path) -> list[Path]:
        """Host directories bind-mounted at the same path: the run dir, the shared dirs, and the working
        directory unless it lies inside one of them."""
        # Absolute but not resolved: the kernel is given these very paths (the engine resolves the
        # host side of a bind mount itself).
        wanted = [connection_file.parent, *self.shared_dirs, *self.readonly_dirs, workdir]
        paths = sorted({Path(os.path.abspath(p)) for p in wanted}, key=lambda p: (len(p.parts), str(p)))
        chosen: list[Path] = []
        for path in paths:
            if not any(path.is_relative_to(parent) for parent in chosen):
                chosen.append(path)
        return chosen

    def kernel_path(self, host_path: Path) -> str:
        """The path at which the container sees a host path inside one of its mounts."""
        host_path = Path(os.path.abspath(host_path))
        for mount, target in getattr(self, "_targets", {}).items():
            if host_path.is_relative_to(mount):
                return str(Path(target) / host_path.relative_to(mount))
        return str(host_path)

    def command(self, connection_file: Path) -> list[str]:
        """The command run in the container."""
        return [
            "python",
            "-m",
            "ipykernel_launcher",
            "-f",
            str(connection_file),
            "--HistoryManager.hist_file=:memory:",
        ]

    def container_options(self, readonly: set[Path], workdir: Path) -> dict[str, Any]:
        """The docker SDK's ``containers.run`` options of this kernel's container (see
        `kernel_container_options`)."""
        return kernel_container_options(self.limits, self._targets, readonly=readonly, workdir=workdir)

    def start(self, connection_file: Path, workdir: Path) -> None:
        """Create and start the kernel's container; return once it runs (the kernel boots on its own).

        Raises:
            BackendUnavailableError: No Docker engine or no kernel image (the message says the fix).
            KernelStartError: The engine refused the container.
        """
        import docker.errors

        if self._container is not None:
            self.stop(graceful=False)
        client = self._docker()
        if not DockerLauncher._stale_checked:  # once per process: containers of dead owners go
            DockerLauncher._stale_checked = True
            self.cleanup_stale()
        mounts = self.mounts(connection_file, workdir)
        readonly = {Path(os.path.abspath(p)) for p in self.readonly_dirs}
        # Writable mounts must be writable by uid 1000. The kernel rewrites the connection file as its own
        # user with mode 0600, so the host keeps its content in memory.
        for folder in mounts:
            folder.mkdir(parents=True, exist_ok=True)
            grant_kernel_access(folder, write=folder not in readonly)
        # The run dir and workdir keep their path (the IPC sockets' paths must agree inside and out);
        # other shared dirs (the snapshot store) go under /mnt, as their host path may lie in a folder
        # the kernel's user cannot enter in the container (e.g. /root/.cache).
        keep = {Path(os.path.abspath(connection_file.parent)), Path(os.path.abspath(workdir))}
        self._targets = {p: str(p) if p in keep else f"{SHARED_MOUNT_ROOT}/{i}" for i, p in enumerate(mounts)}
        name = container_name()
        labels = container_labels()
        try:
            with engine(client):
                container = client.containers.run(
                    self.image,
                    self.command(connection_file),
                    name=name,
                    labels=labels,
                    **self.container_options(readonly, workdir),
                )
        except docker.errors.ImageNotFound as exc:
            self._image_checked = False
            raise BackendUnavailableError(f"the kernel image {self.image} is missing: {self._image_fix()}") from exc
        except docker.errors.APIError as exc:
            # The container may exist (created, not started): do not leave it behind.
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(name, force=True)
            raise KernelStartError(f"the Docker engine could not start the kernel container: {exc}") from exc
        except BackendUnavailableError:  # the engine went away: the container may exist
            _remove_quietly(client, name)
            raise
        with contextlib.suppress(Exception):
            container.reload()  # run() returns the attributes from before the start: no Pid yet
        self._container = container
        self.container_name = name
        self._finalizer = weakref.finalize(self, _remove_quietly, client, container.id)
        self._last_reload = time.monotonic()
        self._kernel_pid = None
        self._init_pid, self._init_start = None, None
        self._init_hidden, self._init_mismatch_since = False, None
        self._connection_file = str(connection_file)
        self._find_init()

    def _find_init(self) -> None:
        """Learn the host pid of the container's init, if it is really visible here (same pid namespace as
        dockerd): its command line is docker-init's, ending with this kernel's connection file. Under load
        the engine may answer before the container has a pid: `pid` asks again later."""
        if self._container is None:
            return
        pid = int(self._container.attrs.get("State", {}).get("Pid") or 0)
        if pid and self._connection_file in host_cmdline(pid):
            self._init_pid, self._init_start = pid, process_start(pid)
            return
        if not pid:
            return
        # Another command line at that pid: another pid namespace (never visible), or, under load, the
        # container's first process before it has become docker-init (runc's own init). Only a mismatch that
        # lasts says "hidden": read once at the start, it left the kernel's pid unknown for good.
        now = time.monotonic()
        if self._init_mismatch_since is None:
            self._init_mismatch_since = now
        self._init_hidden = now - self._init_mismatch_since >= INIT_EXEC_GRACE_S

    def _reload(self, *, force: bool = False) -> dict[str, Any]:
        """The container's State, asking the engine at most every RELOAD_INTERVAL_S unless forced."""
        import docker.errors

        if self._container is None:
            return {}
        now = time.monotonic()
        if force or now - self._last_reload >= RELOAD_INTERVAL_S:
            self._last_reload = now
            try:
                self._container.reload()
            except docker.errors.NotFound:
                return {"Status": "removed"}
            except Exception as exc:  # an unreachable engine: the kernel counts as dead (waits end)
                if not engine_unreachable(exc) and not isinstance(exc, docker.errors.DockerException):
                    raise
                return {"Status": "unknown", "Error": str(unreachable(exc, self._client))}
        return dict(self._container.attrs.get("State", {}))

    def is_alive(self) -> bool:
        """Whether the container still runs: a /proc check of its init when visible, else the engine
        (asked at most every RELOAD_INTERVAL_S)."""
        if self._container is None:
            return False
        if self._init_pid is not None:
            if process_start(self._init_pid) == self._init_start:
                return True
            return bool(self._reload(force=True).get("Running"))  # confirm before declaring death
        return bool(self._reload().get("Running"))

    def check_backend(self) -> None:
        """Ping the engine: an unreachable one raises
        [`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] (one line)."""
        client = self._docker()
        with engine(client):
            client.ping()

    def out_of_memory(self) -> bool:
        """Docker's own ``OOMKilled`` flag of the container."""
        if self._container is None:
            return False
        return bool(self._reload(force=True).get("OOMKilled"))

    def limit_events(self) -> dict[str, int]:
        """Limit hits from the container's cgroup on the host: the kernel cannot forge them."""
        return cgroup_limit_events(self._container.id) if self._container is not None else {}

    def exit_reason(self) -> str:
        """Exit code (or signal) and OOM kill from the container's state, and its last log line."""
        if self._container is None:
            return "never started" if self.container_name is None else f"container stopped ({self._last_stop})"
        state = self._reload(force=True)
        status = state.get("Status", "unknown")
        if state.get("Running"):
            return f"container {self.container_name} still running"
        if status == "removed":
            return f"container {self.container_name} was removed"
        parts = [f"container {self.container_name} {status}"]
        code = state.get("ExitCode")
        if isinstance(code, int):
            parts.append(f"exit code {code}" + (f" ({signal_name(code)})" if code > 128 else ""))
        if state.get("OOMKilled"):
            parts.append(f"OOMKilled: out of memory (limit {self.limits.memory_mb} MiB)")
        if state.get("Error"):
            parts.append(f"error: {state['Error']}")
        if (line := last_log_line(self._container)) is not None:
            parts.append(f"last log line: {line[:300]}")
        return "; ".join(parts)

    def interrupt(self) -> None:
        """SIGINT to the container's init (tini), which forwards it to the kernel."""
        import docker.errors

        if self._container is None:
            return
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError), engine(self._client):
            self._container.kill(signal="SIGINT")

    def stop(self, *, graceful: bool = True) -> str:
        """Stop and remove the container. Returns ``exited`` (it had already stopped), ``terminated``
        (SIGTERM within TERM_GRACE_S), ``killed`` (removed by force) or ``lost`` (the engine failed).
        Idempotent: a second call returns what the first one did."""
        import docker.errors

        container, self._container = self._container, None
        if container is None:
            return self._last_stop
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        path = "killed"
        try:
            state = self._state_of(container)
            if not state.get("Running"):
                path = "exited"
            elif graceful:
                with contextlib.suppress(docker.errors.APIError):  # it may have exited meanwhile
                    container.kill(signal="SIGTERM")
                deadline = time.monotonic() + TERM_GRACE_S
                while time.monotonic() < deadline:
                    if not self._state_of(container, wait_s=0.05).get("Running"):
                        path = "terminated"
                        break
            container.remove(force=True)
        except docker.errors.NotFound:
            path = "exited"
        except Exception as exc:  # the engine failed or is unreachable: the container is lost to us
            if not engine_unreachable(exc) and not isinstance(exc, docker.errors.DockerException):
                raise
            path = "lost"
            _remove_quietly(self._client, container.id)
        self._init_pid = self._kernel_pid = None
        self._last_stop = path
        return path

    def _state_of(self, container: Any, wait_s: float = 0.0) -> dict[str, Any]:
        """A container's state; with ``wait_s``, first wait that long for the init to exit."""
        if self._init_pid is not None:
            deadline = time.monotonic() + wait_s
            while process_start(self._init_pid) == self._init_start:
                if time.monotonic() >= deadline:
                    return {"Running": True}
                time.sleep(0.005)
            return {"Running": False}
        if wait_s:
            time.sleep(wait_s)
        container.reload()
        return dict(container.attrs.get("State", {}))

    def pid(self) -> int | None:
        """Host pid of the ipykernel process (the child of the container's init), if visible here."""
        if self._container is None:
            return None
        if self._init_pid is None:
            if self._init_hidden:
                return None
            self._reload(force=True)
            self._find_init()
            if self._init_pid is None:
                return None
        if self._kernel_pid is not None and process_start(self._kernel_pid) is not None:
            return self._kernel_pid
        for child in host_children(self._init_pid):
            if any("ipykernel" in part for part in host_cmdline(child)):
                self._kernel_pid = child
                return child
        return None

    @classmethod
    def cleanup_stale(cls, *, dry_run: bool = False) -> list[str]:
        """Remove kernel containers of this host whose owning process is gone; return their names.

        Containers of live processes, and of other hosts sharing the engine, are left alone. Returns
        ``[]`` when no engine is reachable (there is nothing to clean).
        """
        try:
            return remove_stale_containers(dry_run=dry_run)
        except BackendUnavailableError:
            return []

    def owner_record(self) -> dict[str, list[Any]]:
        """The container's id (the reaper removes it if this process dies)."""
        return {"processes": [], "containers": [str(self._container.id)] if self._container is not None else []}
