"""Kernels never outlive their owner: normal exit, SIGKILL, ``themisto sandbox gc``, a lost Docker engine.

Every test runs real owner programs (subprocesses that start real kernels) and ends only the processes
and containers it started, by id. Docker tests skip where no engine can run (fail in CI), like the
others; the real engine is never stopped: a lost engine is a proxy socket in front of it that goes away.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.conftest import wait_ended
from themisto_env.errors import BackendUnavailableError, KernelDiedError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.lifetime.leftovers import UNOWNED_GRACE_S
from themisto_env.sandbox.lifetime.owners import RUN_DIR_PREFIX, identity, process_record, process_start

# An owner program: starts a kernel, prints what it made (one JSON line), then exits or waits to be killed.
OWNER = """
import json, sys, time
from themisto_env.sandbox.lifetime import reaper as lifetime
from themisto_env.sandbox.kernel.core import Kernel

backend, mode = sys.argv[1], sys.argv[2]
kernel = Kernel(backend).start()
assert kernel.execute("x = 1").status == "ok"
record = json.loads((kernel.run_dir / "owner.json").read_text())
print(json.dumps({
    "run_dir": str(kernel.run_dir),
    "kernel_pid": kernel.launcher.pid(),
    "processes": record["processes"],
    "containers": record["containers"],
    "reapers": lifetime.reaper_pids(),
}), flush=True)
if mode == "wait":
    time.sleep(600)
"""


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll until ``condition`` holds; return the seconds it took (fail after ``timeout_s``)."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"{what} not within {timeout_s:g} s")
        time.sleep(0.02)
    return time.monotonic() - started


def gone(pid: int | None, start: str | None = None) -> bool:
    """Whether a process has exited (a zombie waiting for init counts as gone)."""
    if pid is None:
        return True
    now = process_start(pid)
    return now is None or (start is not None and now != start)


class Owner:
    """A running owner program and what it reported."""

    def __init__(self, backend: str, mode: str = "wait") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", OWNER, backend, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            pytest.fail(f"the owner program failed: {err[-2000:]}")
        info = json.loads(line)
        self.run_dir = Path(info["run_dir"])
        self.kernel_pid: int | None = info["kernel_pid"]
        self.kernel_start = process_start(self.kernel_pid) if self.kernel_pid else None
        self.processes: list[dict[str, Any]] = info["processes"]
        self.containers: list[str] = info["containers"]
        self.reapers: list[int] = info["reapers"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def kernel_gone(self) -> bool:
        return gone(self.kernel_pid, self.kernel_start) and all(gone(p["pid"], p["start"]) for p in self.processes)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def owners() -> Iterator[list[Owner]]:
    """Owner programs started by a test; any still running is killed (its reaper then cleans up)."""
    started: list[Owner] = []
    yield started
    for owner in started:
        owner.close()
    for owner in started:  # let the reapers finish, so that the session sees nothing left behind
        with contextlib.suppress(BaseException):
            wait_until(lambda o=owner: not o.run_dir.exists(), 15, "the reaper's cleanup")


def docker_client() -> Any:
    import docker

    return docker.from_env()


def container_gone(container_id: str) -> bool:
    import docker.errors

    try:
        docker_client().containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def gc(*args: str, engine: bool = False) -> list[str]:
    """Run ``themisto sandbox gc`` on this session's temporary root; return its output lines.

    Without ``engine`` gc sees no Docker engine (the engine's dead-owner containers are host-wide: other
    sessions' would make the counts vary)."""
    command = [sys.executable, "-m", "themisto_env.cli", "sandbox", "gc", "--root", tempfile.gettempdir(), *args]
    env = dict(os.environ)
    if not engine:
        env["DOCKER_HOST"] = f"unix://{tempfile.gettempdir()}/themisto-no-engine.sock"
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert engine or lines[-2].startswith("docker: not checked (the Docker engine at unix://"), lines
    return lines


# -- a normal exit without close() ---------------------------------------------------------------------------


def test_normal_exit_without_close_ends_the_kernel(owners: list[Owner]) -> None:
    owner = Owner("local", mode="exit")
    owners.append(owner)
    assert owner.proc.wait(timeout=60) == 0
    assert not owner.run_dir.exists()  # closed by the atexit hook, before the interpreter ended
    wait_until(owner.kernel_gone, 5, "the kernel process exit")


def test_import_starts_nothing() -> None:
    code = (
        "import threading, themisto_env.sandbox.kernel.core as k, themisto_env.sandbox.lifetime.reaper as l;"
        "print(l._atexit_registered, l._reapers, threading.active_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "{}", "1"]


# -- SIGKILL of the owner ----------------------------------------------------------------------------------------


def test_sigkill_of_the_owner_takes_its_kernel(
    backend: str, owners: list[Owner], busy_machine: Callable[[], int]
) -> None:
    """On a busy machine too: once the reaper ended, the kernel, its run directory and its container are gone
    (the test waits for the reaper's end, an event; no time limit but a guard)."""
    owner = Owner(backend)
    owners.append(owner)
    assert owner.run_dir.exists() and not owner.kernel_gone()
    assert (owner.run_dir / "owner.json").exists()
    if backend == "docker":
        assert owner.containers and not container_gone(owner.containers[0])
    assert owner.reapers
    reapers = {pid: os.pidfd_open(pid) for pid in owner.reapers}
    try:
        busy_machine()
        owner.kill()
        assert not wait_ended(reapers, 120), "the reaper did not end"
    finally:
        for fd in reapers.values():
            os.close(fd)
    assert owner.kernel_gone() and not owner.run_dir.exists()
    if backend == "docker":
        assert container_gone(owner.containers[0])


def test_local_kernel_ends_itself_when_its_parent_dies(owners: list[Owner]) -> None:
    """ipykernel's parent poller (JPY_PARENT_PID) ends the kernel even when no reaper is left."""
    owner = Owner("local")
    owners.append(owner)
    for reaper in owner.reapers:
        os.kill(reaper, signal.SIGKILL)
    owner.kill()
    wait_until(owner.kernel_gone, 5, "the orphaned kernel's exit")
    assert owner.run_dir.exists()  # nobody removed it: that is gc's work (next test)
    assert any(str(owner.run_dir) in line for line in gc())
    assert not owner.run_dir.exists()


# -- themisto sandbox gc ---------------------------------------------------------------------------------------


def _dead_identity() -> dict[str, Any]:
    """The identity of a process that really ran (pid and start time) and has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    dead = identity(proc.pid)
    proc.communicate(b"", timeout=30)
    return dead


def test_gc_removes_a_dead_owners_leftover_and_spares_live_owners(owners: list[Owner]) -> None:
    live = Owner("local")
    owners.append(live)
    # A leftover whose owner and reaper both died, with a kernel-like process still running (started in
    # its own session, as kernels are): gc must kill it, by the recorded pid and start time.
    run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = {
            "version": 1,
            "owner": _dead_identity(),
            "backend": "local",
            "processes": [process_record(orphan.pid)],
            "containers": [],
        }
        (run_dir / "owner.json").write_text(json.dumps(record))
        dry = gc("--dry-run")
        assert f"would kill kernel process {orphan.pid}" in "\n".join(dry)
        assert dry[-1] == "2 item(s) to remove", dry
        assert run_dir.exists() and orphan.poll() is None

        lines = gc()
        assert any(line.startswith(f"killed kernel process {orphan.pid}") for line in lines), lines
        assert any(line.startswith(f"removed run dir {run_dir}") for line in lines), lines
        assert lines[-1] == "2 item(s) removed", lines
        assert orphan.wait(timeout=5) == -signal.SIGKILL
        assert not run_dir.exists()
        # The live owner's kernel works on, untouched.
        assert live.run_dir.exists() and not live.kernel_gone()
        assert not any(str(live.run_dir) in line for line in lines)
        assert gc()[-1] == "0 item(s) removed: nothing left behind"
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        with contextlib.suppress(OSError):
            for path in sorted(run_dir.rglob("*"), reverse=True):
                path.unlink()
            run_dir.rmdir()


def test_gc_leaves_unowned_dirs_that_are_young_or_in_use() -> None:
    young = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
    used = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
    old = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
    long_ago = time.time() - 2 * UNOWNED_GRACE_S
    worker = subprocess.Popen(["sleep", "300"], cwd=used)
    try:
        for path in (used, old):
            os.utime(path, (long_ago, long_ago))
        lines = gc()
        assert f"removed run dir {old} (no owner record)" in lines, lines
        assert young.exists() and used.exists() and not old.exists()
    finally:
        worker.kill()
        worker.wait()
        young.rmdir()
        used.rmdir()


def test_gc_without_an_engine_cleans_local_leftovers_and_says_docker_was_not_checked() -> None:
    run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
    record = {"version": 1, "owner": _dead_identity(), "backend": "local", "processes": [], "containers": []}
    (run_dir / "owner.json").write_text(json.dumps(record))
    lines = gc()
    assert f"removed run dir {run_dir} (owner pid {record['owner']['pid']} dead, local)" in lines, lines
    assert any(line.startswith("docker: not checked (the Docker engine at unix://") for line in lines), lines
    assert lines[-1] == "1 item(s) removed"
    assert not run_dir.exists()


def test_gc_removes_a_dead_owners_container(owners: list[Owner], docker_engine: None) -> None:
    owner = Owner("docker")
    owners.append(owner)
    for reaper in owner.reapers:
        os.kill(reaper, signal.SIGKILL)
    owner.kill()
    (container,) = owner.containers
    assert not container_gone(container)
    lines = gc(engine=True)
    assert any(line.startswith("removed container themisto-kernel-") for line in lines), lines
    assert any(line.startswith(f"removed run dir {owner.run_dir}") for line in lines), lines
    assert container_gone(container) and not owner.run_dir.exists()


# -- a lost Docker engine ----------------------------------------------------------------------------------------


class EngineProxy:
    """A unix socket in front of the real engine's; ``stop`` makes the engine unreachable through it
    (the socket goes, open connections are cut) without touching the engine itself."""

    def __init__(self, path: Path, target: str) -> None:
        self.path, self.target = path, target
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        self.server.settimeout(0.05)
        self.connections: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def real_client(self) -> Any:
        """A client of the engine itself (not through the proxy)."""
        import docker

        return docker.DockerClient(base_url=f"unix://{self.target}")

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.server.close()
        self.path.unlink(missing_ok=True)
        for connection in self.connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()


@pytest.fixture
def engine_proxy(monkeypatch: pytest.MonkeyPatch, docker_engine: None) -> Iterator[EngineProxy]:
    """DOCKER_HOST pointing at a proxy of the real engine (docker backend required)."""
    real = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not real.startswith("unix://"):
        pytest.skip(f"the engine is not on a unix socket ({real})")
    folder = Path(tempfile.mkdtemp(prefix="themisto-engine-"))
    proxy = EngineProxy(folder / "docker.sock", real.removeprefix("unix://"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{proxy.path}")
    yield proxy
    proxy.stop()
    folder.rmdir()


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and len(text) < 600, text
    return text


def test_lost_engine_ends_waits_and_restarts_with_one_line_errors(engine_proxy: EngineProxy) -> None:
    kernel = Kernel("docker").start()
    try:
        assert kernel.execute("print(1)").status == "ok"
        name = kernel.launcher.container_name
        # What an engine restart does: the containers die and the engine does not answer for a while.
        engine_proxy.real_client().api.kill(name)
        engine_proxy.stop()
        started = time.monotonic()
        with pytest.raises(KernelDiedError) as died:
            kernel.execute("print(2)")
        assert time.monotonic() - started < 5
        _one_line(died.value)
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError) as lost:
            kernel.restart()
        assert time.monotonic() - started < 5
        message = _one_line(lost.value)
        assert message.startswith(f"the Docker engine at unix://{engine_proxy.path} is not reachable: "), message
        assert "start it with" in message
    finally:
        kernel.close()  # does not raise without an engine
        engine_proxy.real_client().api.remove_container(name, force=True)


def test_lost_engine_is_a_dead_kernel_when_its_process_is_not_visible(engine_proxy: EngineProxy) -> None:
    """With an engine whose containers' processes are not visible here (remote, rootless), the kernel's
    liveness is the engine's word: an unreachable engine ends a waiting cell with KernelDiedError."""
    kernel = Kernel("docker").start()
    try:
        name = kernel.launcher.container_name
        kernel.launcher._init_pid = None  # type: ignore[attr-defined]  # as on a remote engine
        engine_proxy.stop()
        started = time.monotonic()
        with pytest.raises(KernelDiedError) as died:
            kernel.execute("import time; time.sleep(30)")
        assert time.monotonic() - started < 5
        assert "is not reachable" in _one_line(died.value)
    finally:
        kernel.close()
        engine_proxy.real_client().api.remove_container(name, force=True)


def test_start_without_an_engine_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(BackendUnavailableError) as info:
        Kernel("docker").start()
    assert _one_line(info.value).startswith(f"the Docker engine at unix://{tmp_path}/no-engine.sock is not reachable")


def test_themisto_run_without_an_engine_prints_one_line(tmp_path: Path, env_dataset: dict[str, str]) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "COLUMNS": "60"}
    command = [sys.executable, "-m", "themisto_env.cli", "run", "--agent", "repeat-previous", "--backend", "docker"]
    command += ["--data", env_dataset["dataset"], "--limit", "1", "--out", str(tmp_path / "run")]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-3000:]
    if out.returncode:  # refused outright (else: the sample is reported as an infrastructure failure)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: the Docker engine at unix://"), out.stderr
