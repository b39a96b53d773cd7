"""The conformance suite (the same one `themisto sandbox check` runs) against every backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from themisto_env.sandbox.conformance import CHECKS, checks_for, run_check
from themisto_env.sandbox.launcher import launcher_class

from tests.conftest import BACKENDS, require_backend

CASES = [(backend, check) for backend in BACKENDS for check in CHECKS]


@pytest.mark.parametrize(("backend_name", "check"), CASES, ids=[f"{b}-{c.name}" for b, c in CASES])
def test_conformance(backend_name: str, check, snapshot_dir: Path) -> None:
    if check not in checks_for(backend_name):
        cls = launcher_class(backend_name)
        pytest.skip(f"{backend_name} does not claim {'isolation' if check.isolation else 'limits'} ({cls})")
    require_backend(backend_name)
    result = run_check(check, backend_name, snapshot_dir)
    assert result.passed, result.detail


def test_isolated_backends_claim_the_isolation_checks() -> None:
    assert [c.name for c in checks_for("local")] == [c.name for c in CHECKS if not (c.isolation or c.limits)]
    assert "no-network" in [c.name for c in checks_for("bwrap")]
