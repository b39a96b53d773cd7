"""The conformance suite (the same one `themisto sandbox check` runs) against every backend."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, require_backend
from themisto_env.sandbox.kernel.conformance import CHECKS, checks_for, run_check
from themisto_env.sandbox.kernel.launcher import launcher_class

# Isolation and limit checks are generated only for backends that claim them.
CASES = [(backend, check) for backend in BACKENDS for check in checks_for(backend)]


@pytest.mark.parametrize(("backend_name", "check"), CASES, ids=[f"{b}-{c.name}" for b, c in CASES])
def test_conformance(backend_name: str, check, snapshot_dir: Path) -> None:
    require_backend(backend_name)
    result = run_check(check, backend_name, snapshot_dir)
    assert result.passed, result.detail


def test_bwrap_hides_the_default_store_outside_tmp_from_a_copy_mode_kernel(bwrap_backend: None) -> None:
    """As ``themisto sandbox check --backend bwrap`` runs it: the user's store (in the cache, not under the
    private /tmp that hides the tests' own stores) is read-only to a kernel, and absent in copy mode."""
    (check,) = [c for c in CHECKS if c.name == "store-protected"]
    result = run_check(check, "bwrap")
    assert result.passed, result.detail


def test_each_backend_gets_the_checks_it_claims() -> None:
    assert [c.name for c in checks_for("local")] == [c.name for c in CHECKS if not (c.isolation or c.limits)]
    assert "no-network" in [c.name for c in checks_for("bwrap")]
    assert "memory-limit" not in [c.name for c in checks_for("bwrap")], "bwrap has no limits of its own"
    assert {"no-network", "read-only-root", "memory-limit", "pids-limit"} <= {c.name for c in checks_for("docker")}
    assert not launcher_class("local").isolated


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None, reason="root's refusal, where bwrap exists")
def test_sandbox_check_of_bwrap_as_root_is_one_line_saying_how_root_runs_it() -> None:
    themisto = shutil.which("themisto")
    assert themisto is not None, "the themisto entry point is installed"
    done = subprocess.run(
        [themisto, "sandbox", "check", "--backend", "bwrap"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and not done.stdout.strip(), done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "refuses to run as root" in line and "scripts/setup-bwrap-user.sh" in line and "runuser" in line, line
