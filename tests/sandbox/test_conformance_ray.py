"""The one conformance suite on kernels in Ray actors (``local-ray``).

Its own module: the Ray instance the kind starts is held by a module-scoped fixture, so it is shut down when
this worker moves on to another module (held to the session's end, it met later modules of the worker: a
build that starts its own Ray instance found one running).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import needs
from themisto_env.sandbox.kernel.conformance import Check, KernelKind, checks_for, run_check
from themisto_env.sandbox.kinds import open_kind

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("conformance-local-ray")]


def _checks() -> list[Check]:
    with open_kind("local") as kind:
        return checks_for(kind)


@pytest.fixture(scope="module")
@needs("ray")
def ray_kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelKind]:
    """Kernels in Ray actors on a Ray instance of this module (shut down with it, if it started one)."""
    pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'themisto-env[ray]'")
    with open_kind("local-ray", snapshot_dir=tmp_path_factory.mktemp("store-local-ray")) as kind:
        yield kind


@pytest.mark.parametrize("check", _checks(), ids=lambda check: f"local-ray-{check.name}")
def test_conformance_on_ray(check: Check, ray_kind: KernelKind) -> None:
    result = run_check(check, ray_kind)
    assert result.passed, result.detail
