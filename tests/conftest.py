"""Shared fixtures: backend gating, a kernel per test, and a check that nothing is left running."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.kernel import Kernel

IN_CI = os.environ.get("CI", "").lower() == "true"
BACKENDS = ("local", "bwrap", "docker")


@functools.cache
def backend_unavailable(backend: str) -> str | None:
    """Why a backend cannot run here, or None. Probed once per test session by starting a kernel."""
    if backend == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if backend == "bwrap" and os.geteuid() == 0:
        return "bwrap refuses to run as root (the kernel would read root-only files; see test_bwrap_refuses_root)"
    if backend == "docker":
        try:
            Kernel("docker").start().close()
        except BackendUnavailableError as exc:
            return str(exc)
    return None


def require_backend(backend: str) -> None:
    """Skip (or, for docker in CI, fail) when a backend cannot run on this machine; say why either way.

    CI runs as root, where bwrap refuses by design: its tests are skipped there with that reason."""
    reason = backend_unavailable(backend)
    if reason is None:
        return
    if IN_CI and backend == "docker":
        pytest.fail(f"the {backend} backend must run in CI, but: {reason}")
    pytest.skip(f"{backend} backend unavailable here: {reason}")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each kernel backend in turn (skipped with the reason where it cannot run)."""
    require_backend(request.param)
    return str(request.param)


@pytest.fixture
def snapshot_dir(tmp_path: Path) -> Path:
    """A private snapshot store for one test."""
    return tmp_path / "snapshots"


@pytest.fixture
def local_kernel(snapshot_dir: Path) -> Iterator[Kernel]:
    """A started local kernel, closed after the test."""
    with Kernel("local", snapshot_dir=snapshot_dir) as kernel:
        yield kernel


@pytest.fixture(autouse=True, scope="session")
def nothing_left_running() -> Iterator[None]:
    """After the whole run: no kernel run directories and no labelled containers may remain.

    Kernels of this test session make their run directories in a temp root of its own (TMPDIR, which
    worker processes inherit), so kernels of other sessions on the machine do not count.
    """
    root = Path(tempfile.mkdtemp(prefix="themisto-tests-"))
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = str(root)
    yield
    tempfile.tempdir = saved
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    left = sorted(p.name for p in root.glob("themisto-kernel-*"))
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"kernel run directories left behind: {left}"
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception:  # no engine here: no container can be left behind
        return
    mine = f"themisto-env.host-pid={os.getpid()}"  # other sessions on this machine have their own
    containers = client.containers.list(all=True, filters={"label": ["themisto-env.kernel", mine]})
    assert not containers, f"containers left behind: {[c.name for c in containers]}"


@pytest.fixture(scope="session")
def env_dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A trajectory dataset built by the real builder from a small notebook, with its snapshot store."""
    from tests.env_fixtures import write_notebook
    from themisto_env.replay.build import build_dataset

    root = tmp_path_factory.mktemp("env-dataset")
    notebook = write_notebook(root / "sales.ipynb")
    report = build_dataset([notebook], root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert report.built and not report.failed, report
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}
