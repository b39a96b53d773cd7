"""Shared fixtures: backend gating, a kernel per test, and a check that nothing is left running.

What a test needs is said by the fixtures it uses, and the markers follow from them at collection
(`pytest_collection_modifyitems`), so that no test can forget one:

- ``docker``: it uses the Docker engine: a fixture decorated ``@needs("docker")`` (e.g. ``docker_engine``),
  or a ``docker`` parameter of a parametrized backend (``backend``, ``backend_name``);
- ``bwrap``: the same for the bwrap backend (skipped as root: ``scripts/setup-bwrap-user.sh`` runs them);
- ``environments``: it makes or uses a pinned kernel environment (a venv built by pip; ``@needs``);
- ``training``: it runs a TRL training (``@needs``, the ``rl`` extra);
- ``slow``: said where the test is defined: ``@pytest.mark.slow``, a module's ``pytestmark``, or the
  ``marks`` of a ``pytest.param`` case (one case of a parametrized test), for a test whose call takes more
  than `FAST_SECONDS`.

Fixtures shared by several test folders live here; those of one folder live in its ``conftest.py``
(``tests/sandbox``: the ``backend`` cases, bwrap; ``tests/replay``: pinned environments; ``tests/agents``,
``tests/bridges/rl``). A test carrying ``docker`` or ``bwrap`` is skipped with the reason where that backend
cannot run (in CI, docker fails instead). Every other test is marked ``fast``: ``python3 -m pytest -m fast
-n auto`` is the lane to run between two edits. ``require_backend`` refuses a test that reaches a backend
without its marker.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.template.shared import close_shared_templates

IN_CI = os.environ.get("CI", "").lower() == "true"
#: Backends whose tests must run here: where one cannot, they fail instead of skipping (docker in CI;
#: scripts/setup-bwrap-user.sh sets ``THEMISTO_REQUIRE_BACKENDS=bwrap``).
REQUIRED_BACKENDS = {b for b in os.environ.get("THEMISTO_REQUIRE_BACKENDS", "").split(",") if b} | (
    {"docker"} if IN_CI else set()
)
BACKENDS = ("local", "bwrap", "docker")
#: What a test may need that a developer's machine may lack or that takes minutes; none of these is fast.
NEEDS = ("docker", "bwrap", "environments", "training", "ray")
#: Parameters naming a kernel backend: their ``docker`` and ``bwrap`` values mark the test.
BACKEND_PARAMETERS = ("backend", "backend_name")

Fixture = TypeVar("Fixture", bound=Callable[..., Any])
#: A test whose call takes longer than this in ``python3 -m pytest -m fast --durations=60`` on a 2-core machine
#: under the load of a shared machine (load average about 9; about 2 s on an idle machine) is marked ``slow``
#: where it is defined, so the fast lane leaves it out (850 fast tests took 7 min 3 s serially, 2026-11-25).
#: What each promises stays in the lane on smaller work where a cheaper test checks it (the state rules on
#: the small "faults" trajectory, the metric path of the score cases, one try_cell round trip, the runner on
#: the env tests' samples). Measure again with ``python3 -m pytest -m fast --durations=60``.
FAST_SECONDS = 8.0


def needs(marker: str) -> Callable[[Fixture], Fixture]:
    """Mark every test that uses the decorated fixture (directly or through another fixture) ``marker``.

    Put it under ``@pytest.fixture``: ``@pytest.fixture`` / ``@needs("docker")`` / ``def engine(): ...``.
    """
    if marker not in NEEDS:
        raise ValueError(f"unknown need {marker!r}: one of {', '.join(NEEDS)}")

    def mark(fixture: Fixture) -> Fixture:
        fixture.themisto_needs = marker  # type: ignore[attr-defined]
        return fixture

    return mark


def _needs_of(item: pytest.Item) -> set[str]:
    """The needs of a test: from the fixtures in its closure and its backend parameters."""
    found: set[str] = set()
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for definition in info.name2fixturedefs.get(name, ()) if info is not None else ():
            if (marker := getattr(definition.func, "themisto_needs", None)) is not None:
                found.add(marker)
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for name in BACKEND_PARAMETERS:
            if callspec.params.get(name) in ("docker", "bwrap"):
                found.add(str(callspec.params[name]))
    return found


def _shares_module_work(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module or class (a kernel, a built dataset, a run)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "class", "package")
        for name in getattr(item, "fixturenames", ())
        for definition in info.name2fixturedefs.get(name, ())
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's loadgroup renames the node ids, and before -m selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by what it needs (see the module docstring); mark the rest ``fast``.

    Under pytest-xdist (``--dist loadgroup``), the tests of a module that share a module-scoped fixture (a
    kernel, a dataset, a run) go to one worker (``xdist_group`` named by the module), so that work is done
    once; the other tests spread over the workers one by one. (Session fixtures are made once per worker.)
    """
    for item in items:
        for marker in sorted(_needs_of(item)):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if not any(item.get_closest_marker(m) for m in (*NEEDS, "slow")):
            item.add_marker("fast")
        if item.get_closest_marker("xdist_group") is None and _shares_module_work(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


_RUNNING: list[pytest.Item] = []
"""The test being set up or run (one at a time per process), for `require_backend`'s check."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test marked with a backend that cannot run here, before any of its fixtures starts."""
    _RUNNING[:] = [item]
    for backend in ("docker", "bwrap"):
        if item.get_closest_marker(backend) is not None:
            require_backend(backend)


@functools.cache
def backend_unavailable(backend: str) -> str | None:
    """Why a backend cannot run here, or None. Probed once per test session by starting a kernel."""
    if backend == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if backend == "bwrap" and os.geteuid() == 0:
        return (
            "bwrap refuses to run as root (the kernel would read root-only files; see test_bwrap_refuses_root); "
            "scripts/setup-bwrap-user.sh runs these tests as an unprivileged user"
        )
    if backend == "docker":
        try:
            Kernel("docker").start().close()
        except BackendUnavailableError as exc:
            return str(exc)
    return None


def require_backend(backend: str) -> None:
    """Skip (or, for a required backend, fail) when a backend cannot run on this machine; say why either way.

    A test that reaches docker or bwrap must carry that marker (from a fixture: see the module docstring),
    else the fast lane would run it: such a test fails here with the fix. CI runs as root, where bwrap
    refuses by design: its tests are skipped there with that reason."""
    running = _RUNNING[0] if _RUNNING else None
    if backend in ("docker", "bwrap") and running is not None and running.get_closest_marker(backend) is None:
        pytest.fail(
            f"{running.nodeid} uses the {backend} backend but is not marked {backend!r}: use the "
            f"{backend}_engine fixture, a `{backend}` value of a `backend` parameter, or a fixture under @needs"
        )
    reason = backend_unavailable(backend)
    if reason is None:
        return
    if backend in REQUIRED_BACKENDS:
        pytest.fail(f"the {backend} backend must run here (CI, THEMISTO_REQUIRE_BACKENDS), but: {reason}")
    pytest.skip(f"{backend} backend unavailable here: {reason}")


@pytest.fixture(scope="session")
@needs("docker")
def docker_engine() -> None:
    """The Docker engine and the kernel image (the test is marked ``docker``, skipped where none runs)."""
    require_backend("docker")


@pytest.fixture(scope="session")
@needs("environments")
def pinned_environments() -> None:
    """Pinned kernel environments may be made (venvs pip builds in the user cache: minutes when cold)."""


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
    close_shared_templates()  # the process's kernel templates (shared by its envs) live until exit otherwise
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
    containers = client.containers.list(all=True, filters={"label": ["themisto-env.kernel", mine]}, ignore_removed=True)
    assert not containers, f"containers left behind: {[c.name for c in containers]}"


@pytest.fixture(scope="session")
def env_dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A trajectory dataset built by the real builder from a small notebook, with its snapshot store."""
    from tests.env_fixtures import write_notebook
    from themisto_env.build.builder import build_dataset

    root = tmp_path_factory.mktemp("env-dataset")
    notebook = write_notebook(root / "sales.ipynb")
    report = build_dataset([notebook], root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert report.built and not report.failed, report
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


def wait_for(check: Callable[[], Any], seconds: float = 30.0, *, every: float = 0.1) -> bool:
    """Poll ``check`` until it holds or ``seconds`` pass; whether it held (then once more, at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return bool(check())


def kernels_under(pid: int, *, state_templates: bool = False) -> list[psutil.Process]:
    """The live kernels a process started (its descendants running ipykernel, zombies left out; a kernel
    forked from a template has the template's command line and the name ``ipykernel``), and with
    ``state_templates`` its state templates (``themisto-state``) too."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            running = "ipykernel" in " ".join(child.cmdline()) or child.name() == "ipykernel"
            running = running or (state_templates and child.name() == "themisto-state")
            if child.status() != psutil.STATUS_ZOMBIE and running:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def spans() -> Iterator[Any]:
    """Every span the test's code ends, in the order they end (OpenTelemetry's in-memory exporter, set as
    the env's tracer provider for the test)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from themisto_env import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_provider(provider)
    try:
        yield exporter
    finally:
        tracing.set_provider(None)
        provider.shutdown()
