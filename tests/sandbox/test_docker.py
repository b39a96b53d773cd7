"""Docker-only checks of the ``docker`` backend: isolation, limits, container lifecycle, stale cleanup.

The behaviour every backend shares (execute, interrupt, snapshot, ...) is the conformance suite's; here
is what only a container gives. Tests marked ``docker`` skip, with the reason, when no engine answers or
the kernel image is missing, except in CI (``CI=true``), where they fail: CI never skips Docker.
The first section (the image's package set) needs no engine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import needs
from themisto_env.errors import BackendUnavailableError, KernelDiedError
from themisto_env.sandbox.backends.docker import DockerLauncher
from themisto_env.sandbox.image.debootstrap import debian_mirror
from themisto_env.sandbox.image.spec import ImageSpec, default_image, default_spec, write_context
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.lifetime.leftovers import LABEL_HOST, LABEL_HOST_PID, LABEL_HOST_PID_START, LABEL_KERNEL
from themisto_env.sandbox.models import SandboxLimits

IN_CI = os.environ.get("CI", "").lower() == "true"


# -- the image's package set (no engine needed) ---------------------------------------------------------


def test_default_spec_pins_the_host_versions() -> None:
    from importlib.metadata import version

    spec = default_spec()
    assert f"numpy=={version('numpy')}" in spec.packages
    assert f"ipykernel=={version('ipykernel')}" in spec.packages
    assert f"pyzmq=={version('pyzmq')}" in spec.constraints  # a dependency, pinned too
    assert default_image() == f"themisto-kernel:{spec.tag}"


def test_tag_follows_the_package_set() -> None:
    spec = ImageSpec(packages=["ipykernel==6.29.5", "numpy==1.26.4"])
    same = ImageSpec(packages=["numpy==1.26.4", "ipykernel==6.29.5"])
    other = ImageSpec(packages=["ipykernel==6.29.5", "numpy==2.0.0"])
    assert spec.tag == same.tag
    assert spec.tag != other.tag
    assert len(spec.tag) == 12


def test_build_context_holds_the_pins(tmp_path: Path) -> None:
    spec = ImageSpec(packages=["dill==0.3.8"], constraints=["six==1.16.0"])
    context = write_context(spec, tmp_path / "ctx")
    assert (context / "requirements.txt").read_text() == "dill==0.3.8\n"
    assert (context / "constraints.txt").read_text() == "six==1.16.0\n"
    assert "USER 1000:1000" in (context / "Dockerfile").read_text()
    assert (context / "wheels").is_dir()


def test_debian_mirror_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THEMISTO_DEBIAN_MIRROR", "http://mirror.example/debian")
    assert debian_mirror() == "http://mirror.example/debian"
    monkeypatch.delenv("THEMISTO_DEBIAN_MIRROR")
    assert debian_mirror().startswith("http")


def test_mounts_share_nested_dirs_once(tmp_path: Path) -> None:
    run, store = tmp_path / "run", tmp_path / "store"
    launcher = DockerLauncher(SandboxLimits(), shared_dirs=(run, store))
    assert launcher.mounts(run / "kernel.json", run / "work") == [run, store]
    outside = tmp_path / "notebooks"
    assert launcher.mounts(run / "kernel.json", outside) == [outside, run, store]


def test_import_has_no_side_effects() -> None:
    code = "import sys, themisto_env.sandbox.backends.docker; print('docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- gating ----------------------------------------------------------------------------------------------


@functools.cache
def _docker_unavailable() -> str | None:
    """Why the docker backend cannot run here (no engine, no image), or None."""
    from themisto_env.sandbox.engine import docker_client, image_exists

    try:
        client = docker_client()
    except BackendUnavailableError as exc:
        return str(exc)
    if not image_exists(client, default_image()):
        return f"the kernel image {default_image()} is missing: run `themisto sandbox build-image`"
    return None


@pytest.fixture
@needs("docker")
def docker_client() -> Any:
    """The engine's client; skips (fails in CI) with the reason when the backend cannot run here."""
    reason = _docker_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"the docker backend must run in CI, but: {reason}")
        pytest.skip(f"docker backend unavailable here: {reason}")
    import docker

    return docker.from_env()


@pytest.fixture
def kernel(docker_client: Any, tmp_path: Path) -> Iterator[Kernel]:
    """A started docker kernel, closed after the test."""
    with Kernel("docker", snapshot_dir=tmp_path / "snapshots") as k:
        yield k


def _launcher(kernel: Kernel) -> DockerLauncher:
    launcher = kernel.launcher
    assert isinstance(launcher, DockerLauncher)
    return launcher


def _run(kernel: Kernel, code: str) -> str:
    result = kernel.execute(code)
    assert result.status == "ok", result.text()
    return result.text().strip()


def _own_containers(client: Any) -> list[Any]:
    """Kernel containers started by this test process."""
    return client.containers.list(all=True, filters={"label": [f"{LABEL_KERNEL}=1", f"{LABEL_HOST_PID}={os.getpid()}"]})


# -- isolation -------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_no_network(kernel: Kernel) -> None:
    assert _run(kernel, "import socket; [n for _, n in socket.if_nameindex()]") == "['lo']"
    out = _run(
        kernel,
        "try:\n"
        "    socket.create_connection(('pypi.org', 443), timeout=3)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n",
    )
    assert out.startswith("refused"), out


@pytest.mark.docker
def test_root_is_read_only_and_tmp_writable(kernel: Kernel) -> None:
    out = _run(
        kernel,
        "import errno\n"
        "for target in ('/opt/venv/x', '/etc/x', '/x'):\n"
        "    try:\n"
        "        open(target, 'w').close()\n"
        "        print(target, 'written')\n"
        "    except OSError as exc:\n"
        "        print(target, errno.errorcode[exc.errno])\n",
    )
    assert out.splitlines() == ["/opt/venv/x EROFS", "/etc/x EROFS", "/x EROFS"]
    assert _run(kernel, "open('/tmp/t', 'w').write('ok'); print(open('/tmp/t').read())") == "ok"


@pytest.mark.docker
def test_runs_as_uid_1000_without_capabilities(kernel: Kernel) -> None:
    assert _run(kernel, "import os; print(os.getuid(), os.getgid())") == "1000 1000"
    status = _run(kernel, "print(open('/proc/self/status').read())")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"].strip() == "1"


@pytest.mark.docker
def test_working_directory_and_run_dir_are_shared(kernel: Kernel) -> None:
    assert _run(kernel, "import os; print(os.getcwd())") == str(kernel.run_dir / "work")
    _run(kernel, "open('from-kernel.txt', 'w').write('hi')")
    assert (kernel.run_dir / "work" / "from-kernel.txt").read_text() == "hi"


@pytest.mark.docker
def test_host_pid_is_the_kernel_process(kernel: Kernel) -> None:
    launcher = _launcher(kernel)
    pid = launcher.pid()
    assert pid is not None
    assert b"ipykernel_launcher" in Path(f"/proc/{pid}/cmdline").read_bytes()
    memory = launcher.memory_bytes()
    assert memory is not None and memory > 10 * 2**20


@pytest.mark.docker
def test_the_kernel_pid_is_found_after_a_start_read_before_init_s_exec(
    kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the engine gives the container's pid while it is still runc's init, whose command line is
    not docker-init's: read once at the start, that made the kernel's pid unknown for good (a kill, a memory
    reading and a liveness check then had no process to look at)."""
    launcher = _launcher(kernel)
    container = launcher._container
    state = container.attrs["State"]
    real = state["Pid"]
    launcher._init_pid = launcher._kernel_pid = None
    launcher._init_hidden, launcher._init_mismatch_since = False, None
    monkeypatch.setattr(container, "reload", lambda: None)  # the engine's answer is the one set here
    state["Pid"] = os.getpid()  # a process whose command line is not this container's init
    assert launcher.pid() is None
    state["Pid"] = real  # the init has exec'd docker-init
    pid = launcher.pid()
    assert pid is not None and b"ipykernel_launcher" in Path(f"/proc/{pid}/cmdline").read_bytes()


@pytest.mark.docker
def test_interrupt_reaches_the_kernel_through_init(kernel: Kernel) -> None:
    result = kernel.execute("import time; time.sleep(60)", timeout_s=1.0)
    assert result.status == "timeout"
    assert not result.kernel_restarted
    assert _run(kernel, "print('alive')") == "alive"


# -- limits ----------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_memory_limit_kills_the_kernel(docker_client: Any, tmp_path: Path) -> None:
    limits = SandboxLimits(memory_mb=256)
    with Kernel("docker", limits=limits, snapshot_dir=tmp_path / "snapshots") as kernel:
        with pytest.raises(KernelDiedError) as info:
            kernel.execute("x = b'x' * (1024 * 2**20)")
        assert "OOM" in str(info.value), str(info.value)
        assert not kernel.is_alive()


@pytest.mark.docker
def test_pids_limit_caps_threads(docker_client: Any, tmp_path: Path) -> None:
    limits = SandboxLimits(pids=64)
    with Kernel("docker", limits=limits, snapshot_dir=tmp_path / "snapshots") as kernel:
        out = _run(
            kernel,
            "import threading\n"
            "stop = threading.Event(); started = []\n"
            "try:\n"
            "    for _ in range(1000):\n"
            "        t = threading.Thread(target=stop.wait); t.start(); started.append(t)\n"
            "except RuntimeError as exc:\n"
            "    print('refused', len(started))\n"
            "stop.set()\n"
            "for t in started: t.join()\n",
        )
        assert out.startswith("refused"), out
        assert int(out.split()[1]) < 64
        assert _run(kernel, "print('alive')") == "alive"


# -- lifecycle -------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_container_removed_on_close_and_restart(docker_client: Any, tmp_path: Path) -> None:
    import docker.errors

    kernel = Kernel("docker", snapshot_dir=tmp_path / "snapshots").start()
    try:
        first = _launcher(kernel).container_name
        labels = docker_client.containers.get(first).labels
        assert labels[LABEL_KERNEL] == "1"
        assert labels[LABEL_HOST_PID] == str(os.getpid())
        kernel.restart()
        second = _launcher(kernel).container_name
        assert second != first
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(first)
        assert _run(kernel, "print(1 + 1)") == "2"
    finally:
        kernel.close()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(second)
    assert not _own_containers(docker_client)


@pytest.mark.docker
def test_stop_is_idempotent(docker_client: Any, tmp_path: Path) -> None:
    with Kernel("docker", snapshot_dir=tmp_path / "snapshots") as kernel:
        launcher = _launcher(kernel)
        first = launcher.stop(graceful=True)
        assert first == "terminated"  # SIGTERM through tini ends ipykernel at once
        assert launcher.stop() == first
        assert not launcher.is_alive()
        assert "stopped" in launcher.exit_reason()


@pytest.mark.docker
def test_missing_image_says_how_to_build_it(docker_client: Any, tmp_path: Path) -> None:
    kernel = Kernel(
        "docker",
        snapshot_dir=tmp_path / "snapshots",
        launcher_options={"image": "themisto-kernel:no-such-tag"},
    )
    with pytest.raises(BackendUnavailableError, match="build-image"):
        kernel.start()


@pytest.mark.docker
def test_snapshot_moves_between_container_and_host(docker_client: Any, tmp_path: Path) -> None:
    store = tmp_path / "snapshots"
    with Kernel("docker", snapshot_dir=store) as kernel:
        _run(kernel, "import numpy as np, pandas as pd\ndf = pd.DataFrame({'a': np.arange(5)})")
        info = kernel.snapshots.save()
    with Kernel("local", snapshot_dir=store) as local:
        local.snapshots.restore(info)
        assert _run(local, "print(int(df['a'].sum()))") == "10"


@pytest.mark.docker
def test_cleanup_stale_removes_containers_of_dead_processes(docker_client: Any) -> None:
    import docker.errors

    dead = subprocess.Popen(["true"])
    dead.wait()
    common = {LABEL_KERNEL: "1", LABEL_HOST: socket.gethostname()}
    run = functools.partial(
        docker_client.containers.run,
        default_image(),
        ["python", "-c", "import time; time.sleep(120)"],
        detach=True,
        init=True,
        network_mode="none",
    )
    stale = run(labels={**common, LABEL_HOST_PID: str(dead.pid), LABEL_HOST_PID_START: "0"})
    live = run(labels={**common, LABEL_HOST_PID: str(os.getpid())})
    try:
        removed = DockerLauncher.cleanup_stale()
        assert stale.name in removed
        assert live.name not in removed
        with pytest.raises(docker.errors.NotFound):
            stale.reload()
        live.reload()
    finally:
        for container in (stale, live):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


@pytest.mark.docker
def test_no_container_left_by_this_module(docker_client: Any) -> None:
    # Runs last in this module: every test above must have removed what it started.
    assert not [c.name for c in _own_containers(docker_client)]
