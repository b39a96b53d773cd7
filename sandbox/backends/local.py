"""Kernels as host subprocesses: ``local`` (no isolation) and ``bwrap`` (bubblewrap namespaces).

``local`` is the embedded default. It is **not isolated**: the kernel runs as the current user with the
host's file system and network, and no memory or process limits. Use ``docker`` for code you do not
trust (model-written cells).

``bwrap`` runs the same kernel in bubblewrap namespaces: a separate user (uid 1000, no capabilities),
no network, a read-only view of the host's file system with a private ``/tmp``, at no start-up cost.
The snapshot store is read-only to it, or absent when snapshots are handed in by copy (the launcher's
``hidden_dirs``). It has no memory or process limits of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from themisto_env.errors import BackendUnavailableError, KernelStartError
from themisto_env.sandbox.environments.location import environment_python
from themisto_env.sandbox.kernel.launcher import KERNEL_ENVIRONMENT, KernelLauncher
from themisto_env.sandbox.lifetime.owners import process_record


def _child_pid(pid: int) -> int | None:
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            if children:
                return int(children[0])
    except (OSError, ValueError):
        return None
    return None


class LocalLauncher(KernelLauncher):
    """An ipykernel subprocess of this Python (or of a kernel environment's venv), in its own process group.

    Args:
        environment: A kernel environment's id (``themisto kernel-env create``): the kernel runs its venv's Python.
    """

    name: ClassVar[str] = "local"
    isolated: ClassVar[bool] = False

    def __init__(self, *args: object, environment: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self.environment_id = environment

    @property
    def python(self) -> str:
        """The Python that runs the kernel (a missing environment raises when the kernel starts).

        Raises:
            BackendUnavailableError: The kernel environment is not on this machine.
        """
        return str(environment_python(self.environment_id)) if self.environment_id is not None else sys.executable

    def command(self, connection_file: Path, workdir: Path) -> list[str]:
        """The command line that starts the kernel."""
        return [self.python, *self.program(connection_file)]

    def program(self, connection_file: Path) -> list[str]:
        """What the Python runs: ipykernel on this connection file (a kernel template runs its own program)."""
        return ["-m", "ipykernel_launcher", "-f", str(connection_file), "--HistoryManager.hist_file=:memory:"]

    def environment(self, connection_file: Path) -> dict[str, str]:
        """The kernel's environment: the host's, with a private IPython directory."""
        env = dict(os.environ)
        env["IPYTHONDIR"] = str(connection_file.parent / "ipython")
        env["PYTHONUNBUFFERED"] = "1"
        env.update(KERNEL_ENVIRONMENT)
        env.pop("THEMISTO_RECORD_PATH", None)
        if self.environment_id is not None:  # the venv's packages only, not the host's
            for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"):
                env.pop(name, None)
        # ipykernel's parent poller ends the kernel within a second once its parent is no longer this
        # process (it compares getppid() with this pid): a kernel never outlives its owner.
        env["JPY_PARENT_PID"] = str(os.getpid())
        return env

    def start(self, connection_file: Path, workdir: Path) -> None:
        self._log = connection_file.parent / "kernel.log"
        with open(self._log, "ab") as log:
            try:
                self._proc = subprocess.Popen(
                    self.command(connection_file, workdir),
                    cwd=workdir,
                    env={**self.environment(connection_file), "PWD": str(workdir)},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise KernelStartError(f"could not start the {self.name} kernel: {exc}") from exc

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_reason(self) -> str:
        if self._proc is None:
            return "never started"
        code = self._proc.poll()
        if code is None:
            return "still running"
        tail = ""
        if self._log is not None and self._log.exists():
            lines = self._log.read_text(errors="replace").strip().splitlines()
            tail = f"; last log line: {lines[-1][:300]}" if lines else ""
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}{tail}"
        return f"exit code {code}{tail}"

    def pid(self) -> int | None:
        return self._proc.pid if self.is_alive() and self._proc is not None else None

    def owner_record(self) -> dict[str, list[Any]]:
        if self._proc is None:
            return super().owner_record()
        return {"processes": [process_record(self._proc.pid)], "containers": []}

    def interrupt(self) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGINT)

    def stop(self, *, graceful: bool = True) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return "exited"
        if proc.poll() is not None:  # it exited (os._exit, a crash): what it started goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return "exited"
        if graceful:
            proc.terminate()
            try:
                proc.wait(timeout=2)
                # What the kernel started (a cell's child processes) goes too. The group id stays
                # reserved while any member lives, so this cannot reach an unrelated process.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return "terminated"
            except subprocess.TimeoutExpired:
                pass
        with_group = _kill_group(proc.pid)
        proc.wait(timeout=5)
        return "killed" + (" (group)" if with_group else "")


def _kill_group(pid: int) -> bool:
    try:
        os.killpg(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
        return False


#: Why bwrap refuses root, and how root runs it the same way (an unprivileged user with its own venv).
ROOT_REFUSAL = (
    "the bwrap backend refuses to run as root (the kernel would read root-only files): run as an unprivileged "
    "user (as root, from a checkout: `bash scripts/setup-bwrap-user.sh --setup-only` makes the user "
    "themisto-bwrap with a venv, then `runuser -u themisto-bwrap -- /opt/themisto-bwrap/venv/bin/themisto "
    "sandbox check --backend bwrap`), or use --backend docker"
)


def _hiding(folder: Path) -> list[str]:
    """bwrap arguments that take ``folder`` out of the read-only view of the host (to come before the other
    binds): its parent becomes a read-only tmpfs holding its siblings, bound back from the host."""
    folder = Path(os.path.abspath(folder))
    if not folder.exists() or folder.is_relative_to("/tmp"):
        return []  # nothing to hide, or hidden already by the private /tmp
    parent = folder.parent
    if parent == Path("/"):  # a tmpfs over the root would hide everything: cover the folder (left empty)
        return ["--tmpfs", str(folder), "--remount-ro", str(folder)]
    args = ["--perms", "0755", "--tmpfs", str(parent)]
    for sibling in sorted(parent.iterdir()):
        if sibling.name != folder.name:
            args += ["--ro-bind-try", str(sibling), str(sibling)]
    return [*args, "--remount-ro", str(parent)]


class BwrapLauncher(LocalLauncher):
    """The local kernel inside bubblewrap: own user, no network, no capabilities, read-only host."""

    name: ClassVar[str] = "bwrap"
    isolated: ClassVar[bool] = True

    def command(self, connection_file: Path, workdir: Path) -> list[str]:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise BackendUnavailableError(
                "the bwrap backend needs bubblewrap: install it with `apt-get install bubblewrap`"
            )
        if os.geteuid() == 0:
            # bwrap started by root maps the sandbox's user to root outside: the kernel could read
            # every root-only file. Refuse rather than pretend to isolate.
            raise BackendUnavailableError(ROOT_REFUSAL)
        binds: list[str] = []
        for folder in sorted({Path(p) for p in self.hidden_dirs}):  # first: later binds may land inside
            binds += _hiding(folder)
        # The Python running the kernel may live under /tmp (a venv there), which the private /tmp
        # would hide: bind it back, read-only.
        pythons = {sys.prefix, sys.base_prefix, *site.getsitepackages()}
        if self.environment_id is not None:  # the venv, and the Python it was made from
            venv = Path(self.python).parent.parent
            pythons |= {str(venv), str(Path(os.path.realpath(self.python)).parent.parent)}
        for folder in sorted(pythons):
            if Path(folder).is_relative_to("/tmp") and Path(folder).exists():
                binds += ["--ro-bind", folder, folder]
        for folder in sorted({str(p) for p in self.readonly_dirs}):
            binds += ["--ro-bind", folder, folder]
        for folder in sorted({connection_file.parent, workdir, *self.shared_dirs}):
            binds += ["--bind", str(folder), str(folder)]
        return [
            bwrap,
            "--unshare-user",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--cap-drop",
            "ALL",
            "--as-pid-1",
            "--die-with-parent",
            "--new-session",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            *binds,
            "--chdir",
            str(workdir),
            "--",
            *super().command(connection_file, workdir),
        ]

    def pid(self) -> int | None:
        outer = super().pid()
        if outer is None:
            return None
        for _ in range(50):  # the namespaced child appears right after bwrap forks
            child = _child_pid(outer)
            if child is not None:
                return child
            time.sleep(0.002)
        return None
