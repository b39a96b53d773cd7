"""One frozen `KernelSpec`: a value, hashable, equal however it was spelled; the shared templates and pools are
keyed by it (equal specs share one, different specs do not)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.pool import shared_pool
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.sandbox.template.shared import shared_template, template_source


def test_a_spec_is_frozen_and_hashable() -> None:
    spec = KernelSpec("local", preload=("json",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.backend = "docker"  # type: ignore[misc]
    with pytest.raises(ValueError):  # its limits are frozen too: no change behind a key
        spec.limits.timeout_s = 1.0  # type: ignore[misc]
    assert {spec: 1}[KernelSpec("local", preload=("json",))] == 1


def test_equal_kernels_make_equal_specs_however_spelled(tmp_path: Path) -> None:
    one = KernelSpec(
        "docker",
        snapshot_dir=tmp_path,
        preload=["json", "csv"],
        launcher_options={"image": "x", "a": 1},
    )
    other = KernelSpec.of(
        "docker",
        snapshot_dir=str(tmp_path),
        preload=("json", "csv"),
        launcher_options={"a": 1, "image": "x"},
    )
    assert one == other and hash(one) == hash(other)
    assert KernelSpec.of(one) is one
    differing = [
        KernelSpec.of(one, backend="local"),
        KernelSpec.of(one, limits=SandboxLimits(timeout_s=5)),
        KernelSpec.of(one, snapshot_dir=tmp_path / "other"),
        one.with_access("copy"),
        KernelSpec.of(one, environment="0123456789ab"),
        KernelSpec.of(one, preload=("json",)),
        KernelSpec.of(one, launcher_options={"image": "y"}),
        KernelSpec.of(one, fork=True),
    ]
    assert len({one, *differing}) == len(differing) + 1


def test_a_kernel_made_from_fields_or_from_a_spec_is_the_same_kind(tmp_path: Path) -> None:
    spec = KernelSpec("local", snapshot_dir=tmp_path, store_access="copy", limits=SandboxLimits(timeout_s=7))
    made = Kernel("local", snapshot_dir=tmp_path, store_access="copy", limits=SandboxLimits(timeout_s=7))
    assert made.spec == spec == Kernel(spec).spec
    assert (made.backend, made.store_access, made.limits.timeout_s) == ("local", "copy", 7)


def test_equal_specs_share_one_template_and_different_specs_do_not(tmp_path: Path) -> None:
    spec = KernelSpec("local", snapshot_dir=tmp_path / "snapshots", preload=("json",), fork=True)
    first = shared_template(spec)
    try:
        assert (
            shared_template(KernelSpec.of("local", snapshot_dir=tmp_path / "snapshots", preload=["json"], fork=True))
            is first
        )
        source = template_source(spec)
        assert source is not None and source() is first
        other = shared_template(KernelSpec.of(spec, preload=("csv",)))
        try:
            assert other is not first and other.preload == ("csv",)
        finally:
            other.close()
    finally:
        first.close()
    assert template_source(KernelSpec.of(spec, fork=False)) is None  # not forked: no template to give


def test_a_template_takes_its_spec_and_forks_kernels_of_it(tmp_path: Path) -> None:
    spec = KernelSpec("local", snapshot_dir=tmp_path / "snapshots", preload=("colorsys",))
    with KernelTemplate(spec, spares=0) as template:
        assert template.spec == spec and template.preload == ("colorsys",)
        with template.kernel() as kernel:
            assert kernel.spec == spec  # type: ignore[attr-defined]
            found = kernel.execute("import sys; 'colorsys' in sys.modules").outputs
            assert found[0]["data"]["text/plain"] == "True"  # the spec's preload, imported by the template


def test_equal_specs_share_one_pool_and_different_specs_do_not(tmp_path: Path) -> None:
    spec = KernelSpec("local", snapshot_dir=tmp_path / "snapshots")
    pools = [shared_pool((s, 0), functools.partial(Kernel, s), size=0) for s in (spec, KernelSpec.of(spec))]
    copy = spec.with_access("copy")
    other = shared_pool((copy, 0), functools.partial(Kernel, copy), size=0)
    try:
        assert pools[0] is pools[1] and other is not pools[0]
    finally:
        for pool in [*pools, other]:
            pool.release()
    assert pools[0].closed and other.closed


@pytest.mark.parametrize(
    ("backend", "fork", "read", "copy"),
    [
        ("local", True, None, None),
        ("bwrap", True, None, None),
        ("docker", True, "only model-written code is forked", None),
        ("local", False, "fork=False", "fork=False"),
    ],
)
def test_the_fork_policy_lives_with_the_spec(backend: str, fork: bool, read: str | None, copy: str | None) -> None:
    spec = KernelSpec(backend, fork=fork)
    for access, expected in (("read", read), ("copy", copy)):
        reason = spec.with_access(access).not_forked  # type: ignore[arg-type]
        assert (reason is None) == (expected is None) and (expected is None or expected in str(reason)), reason
        assert spec.with_access(access).forks == (expected is None)  # type: ignore[arg-type]
