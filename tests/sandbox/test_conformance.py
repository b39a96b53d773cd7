"""The one conformance suite (the same one `themisto sandbox check` runs) on every kind of kernel: started on
each backend and forked from a template (local, bwrap, docker).

Each kind is opened once per module run in a test process, and closed when the process moves on to another
module (held to the session's end, the docker-forked kind's template container met later modules of the worker
that count their process's containers); the cases of a forked kind run in one worker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.conftest import BACKENDS, require_backend
from themisto_env.sandbox.kernel.conformance import CHECKS, Check, KernelKind, checks_for, run_check
from themisto_env.sandbox.kinds import kind_name, open_kind

#: (backend, how) of every kind the suite runs on; bwrap's skip as root (its refusal).
KINDS = [
    *((backend, "started") for backend in BACKENDS),
    *((backend, "forked") for backend in BACKENDS),
]


def _checks(backend: str) -> list[Check]:
    """The checks of a backend's kinds: what its launcher claims (opening a started kind starts nothing)."""
    with open_kind(backend) as kind:
        return checks_for(kind)


def _case(backend: str, how: str, check: Check) -> Any:
    marks = [pytest.mark.xdist_group(f"conformance-{backend}-{how}")] if how != "started" else []
    return pytest.param(backend, how, check, marks=marks, id=f"{kind_name(backend, how)}-{check.name}")


CASES = [_case(backend, how, check) for backend, how in KINDS for check in _checks(backend)]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str, str], KernelKind]]:
    """Opens a kind the first time a test asks for it, on a snapshot store of its own; all close with the module."""
    held, opened = ExitStack(), dict[str, KernelKind]()

    def kind(backend: str, how: str) -> KernelKind:
        name = kind_name(backend, how)
        if name not in opened:
            store = tmp_path_factory.mktemp(f"store-{name}")
            opened[name] = held.enter_context(open_kind(name, snapshot_dir=store))
        return opened[name]

    with held:
        yield kind


@pytest.mark.parametrize(("backend_name", "how", "check"), CASES)
def test_conformance(backend_name: str, how: str, check: Check, kinds: Callable[[str, str], KernelKind]) -> None:
    require_backend(backend_name)
    result = run_check(check, kinds(backend_name, how))
    assert result.passed, result.detail


def test_bwrap_hides_the_default_store_outside_tmp_from_a_copy_mode_kernel(bwrap_backend: None) -> None:
    """As ``themisto sandbox check --backend bwrap`` runs it: the user's store (in the cache, not under the
    private /tmp that hides the tests' own stores) is read-only to a kernel, and absent in copy mode."""
    (check,) = [c for c in CHECKS if c.name == "store-protected"]
    with open_kind("bwrap") as kind:
        result = run_check(check, kind)
    assert result.passed, result.detail


def test_each_kind_gets_the_checks_it_claims() -> None:
    def names(name: str) -> list[str]:
        with open_kind(name) as kind:
            return [c.name for c in checks_for(kind)]

    assert names("local") == [c.name for c in CHECKS if not (c.isolation or c.limits)]
    assert names("local-forked") == names("local"), "a forked kernel is held to what a started one is"
    assert "no-network" in names("bwrap") and "no-network" in names("bwrap-forked")
    assert "memory-limit" not in names("bwrap"), "bwrap has no limits of its own"
    assert {"no-network", "read-only-root", "memory-limit", "pids-limit"} <= set(names("docker-forked"))
    assert {"contract", "interrupt", "restart", "dead-and-closed"} <= set(names("local")), "the contract's checks"


def test_a_name_that_is_no_kind_is_one_clear_error() -> None:
    from themisto_env.errors import ConfigError

    with pytest.raises(ConfigError, match="BACKEND or BACKEND-forked"), open_kind("local-cloned"):
        pass


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
