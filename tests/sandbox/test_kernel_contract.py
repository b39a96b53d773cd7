"""The kernel contract (:class:`KernelLike`): a started kernel, a forked kernel and a kernel in a Ray actor
each offer every member of the contract with the contract's signature, and the same script of calls gets
the same answers from each. The kernels are composed, not inherited: no project class in their MRO but
their own.

Real kernels throughout (a local one, one forked from a real template, one in a real Ray actor).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import needs
from themisto_env.sandbox.kernel.contract import KernelLike, LauncherReadings
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.ray.kernel import RemoteKernel, make_kernel
from themisto_env.sandbox.ray.placement import RayPlacement
from themisto_env.sandbox.template.core import KernelTemplate

#: Makes one started kernel of a kind, on a snapshot store shared by the kernels of a test.
StartKernel = Callable[[], KernelLike]


def contract_members(protocol: type) -> dict[str, Any]:
    """The members a protocol declares (its methods and properties, ``__enter__``/``__exit__`` included)."""
    skip = {"__init__", "__subclasshook__", "__protocol_attrs__", "__non_callable_proto_members__"}
    return {
        name: value
        for name, value in vars(protocol).items()
        if (not name.startswith("_") or name in ("__enter__", "__exit__"))
        and name not in skip
        and (callable(value) or isinstance(value, property))
    }


def broken_members(implementation: object, protocol: type) -> list[str]:
    """Which members of ``protocol`` the object lacks, or offers with another signature (parameter names,
    kinds, defaults and annotations; ``self`` aside). Properties may be plain attributes."""
    broken = []
    for name, declared in contract_members(protocol).items():
        try:
            offered = inspect.getattr_static(implementation, name)
        except AttributeError:
            broken.append(f"{name}: missing")
            continue
        if isinstance(declared, property):
            if callable(offered) and not isinstance(offered, property):
                broken.append(f"{name}: a method, not an attribute")
            continue
        if not callable(offered):
            broken.append(f"{name}: not a method")
            continue
        wanted, got = inspect.signature(declared), inspect.signature(offered)
        wanted_params = [(p.name, p.kind, p.default, p.annotation) for p in wanted.parameters.values()][1:]
        got_params = [(p.name, p.kind, p.default, p.annotation) for p in got.parameters.values()][1:]
        if wanted_params != got_params or wanted.return_annotation not in (got.return_annotation, "Self"):
            broken.append(f"{name}: {got} is not {wanted}")
    return broken


# -- the implementations --------------------------------------------------------------------------------


@pytest.fixture
def local_kernels(snapshot_dir: Path) -> Iterator[StartKernel]:
    """Kernels started on this machine."""
    started: list[KernelLike] = []

    def start() -> KernelLike:
        started.append(make_kernel("local", snapshot_dir=snapshot_dir).start())
        return started[-1]

    yield start
    for kernel in started:
        kernel.close()


@pytest.fixture
def forked_kernels(snapshot_dir: Path) -> Iterator[StartKernel]:
    """Kernels forked from a kernel template (the same Kernel class, with a fork launcher)."""
    with KernelTemplate("local", snapshot_dir=snapshot_dir, spares=0) as template:
        started: list[KernelLike] = []

        def start() -> KernelLike:
            started.append(template.kernel())
            return started[-1]

        yield start
        for kernel in started:
            kernel.close()


@pytest.fixture(scope="module")
@needs("ray")
def ray_address() -> Iterator[str]:
    """A Ray instance on this machine for the module."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'themisto-env[ray]'")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


@pytest.fixture
def ray_kernels(ray_address: str, snapshot_dir: Path) -> Iterator[StartKernel]:
    """Kernels in Ray actors (made as the env makes them: ``make_kernel(ray=...)``)."""
    started: list[KernelLike] = []

    def start() -> KernelLike:
        kernel = make_kernel("local", ray=RayPlacement(address=ray_address), snapshot_dir=snapshot_dir)
        started.append(kernel.start())
        return kernel

    yield start
    for kernel in started:
        kernel.close()


# -- one script, the same answers -------------------------------------------------------------------------


def run_script(start: StartKernel) -> dict[str, Any]:
    """Execute, inspect, snapshot, restore into another kernel, interrupt, restart and close; what each
    answered, as plain data."""
    kernel, other = start(), start()
    answers: dict[str, Any] = {}
    result = kernel.execute("x = [1, 2, 3]\nprint(sum(x))", timeout_s=30)
    answers["execute"] = (result.status, result.outputs, result.kernel_restarted)
    answers["inspect"] = kernel.introspect.inspect_variable("x").repr
    answers["variables"] = [(row.name, row.type) for row in kernel.introspect.list_variables().variables]
    fingerprint = kernel.introspect.fingerprint()
    info = kernel.snapshots.save()
    answers["snapshot"] = (info.names, info.digest in kernel.store)
    restored = other.snapshots.restore(info)
    answers["restore"] = (
        restored.names,
        other.introspect.inspect_variable("x").repr,
        other.introspect.fingerprint() == fingerprint,
    )
    answers["error"] = kernel.execute("1 / 0").status

    interrupted: dict[str, Any] = {}
    cell = threading.Thread(
        target=lambda: interrupted.update(result=kernel.execute("import time\ntime.sleep(30)", timeout_s=60))
    )
    cell.start()
    time.sleep(1.5)  # the cell is running
    kernel.interrupt()
    cell.join(timeout=30)
    stopped = interrupted["result"]
    answers["interrupt"] = (stopped.status, [o.get("ename") for o in stopped.outputs], kernel.restarts)
    answers["after interrupt"] = kernel.introspect.inspect_variable("x").repr

    kernel.restart()
    answers["restart"] = (kernel.restarts, kernel.is_alive(), kernel.introspect.list_variables().total)
    answers["launcher"] = (kernel.launcher.pid() is not None, isinstance(kernel.launcher.enforces_limits, bool))

    kernel.close()
    kernel.close()  # idempotent
    answers["close"] = kernel.is_alive()
    return answers


@pytest.mark.slow
def test_a_started_and_a_forked_kernel_meet_the_contract_and_answer_alike(
    local_kernels: StartKernel, forked_kernels: StartKernel
) -> None:
    for start in (local_kernels, forked_kernels):
        kernel = start()
        assert broken_members(kernel, KernelLike) == [], type(kernel)
        assert broken_members(kernel.launcher, LauncherReadings) == [], type(kernel.launcher)
    assert type(forked_kernels()) is Kernel, "a forked kernel is a Kernel with another launcher"
    started = run_script(local_kernels)
    assert started["execute"] == ("ok", [{"output_type": "stream", "name": "stdout", "text": "6\n"}], False)
    assert started["restore"] == (["x"], "[1, 2, 3]", True)
    assert started["interrupt"] == ("error", ["KeyboardInterrupt"], 0)
    assert started["restart"] == (1, True, 0)
    assert started["close"] is False
    assert run_script(forked_kernels) == started


@pytest.mark.slow
def test_a_kernel_in_a_ray_actor_meets_the_contract_and_answers_as_a_local_one(
    local_kernels: StartKernel, ray_kernels: StartKernel
) -> None:
    kernel = ray_kernels()
    assert type(kernel) is RemoteKernel
    assert broken_members(kernel, KernelLike) == []
    assert broken_members(kernel.launcher, LauncherReadings) == []
    assert run_script(ray_kernels) == run_script(local_kernels)


def test_each_implementation_declares_every_member_of_the_contract(snapshot_dir: Path) -> None:
    """Unstarted, nothing runs: the classes themselves offer the contract (the properties of an
    unstarted kernel are not read)."""
    for kernel in (Kernel("local", snapshot_dir=snapshot_dir), RemoteKernel("local", snapshot_dir=snapshot_dir)):
        assert broken_members(kernel, KernelLike) == [], type(kernel)


def test_the_kernels_are_composed_not_inherited() -> None:
    """No project class in a kernel's method resolution order but its own: its parts are members."""
    for cls in (Kernel, RemoteKernel):
        ours = [c for c in cls.__mro__ if c.__module__.startswith("themisto_env")]
        assert ours == [cls], cls.__mro__
    kernel = Kernel("local")
    assert {type(part).__name__ for part in vars(kernel).values()} >= {
        "KernelProcess",
        "KernelMessaging",
        "KernelSnapshots",
        "KernelIntrospection",
    }
