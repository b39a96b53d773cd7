"""The kernel contract (`KernelLike`) is narrow: the kernel's facts, lifetime, `execute` and `call`, and two
named parts (`snapshots`, `introspect`), each a small protocol of its own. Every implementation declares
each member with the contract's signature, and none re-exposes a part's methods on the kernel.

What each kind of kernel does with the contract (the same answers, the same failures, its parts after death
or close) is the conformance suite's, run on every kind (tests/sandbox/test_conformance.py).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from themisto_env.sandbox.kernel.contract import (
    IntrospectionLike,
    KernelLike,
    SnapshotsLike,
    broken_members,
    contract_members,
)
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.introspection import KernelIntrospection
from themisto_env.sandbox.kernel.snapshots import KernelSnapshots

#: The contract's members: 15 public ones (31 before the parts), and the context manager's two.
KERNEL_MEMBERS = {
    *("backend", "environment", "limits", "store", "restarts", "launcher"),
    *("start", "close", "__enter__", "__exit__", "is_alive", "interrupt", "restart"),
    *("execute", "call"),
    *("snapshots", "introspect"),
}
SNAPSHOTS_MEMBERS = {"save", "restore", "workdir", "files", "set_files"}
INTROSPECTION_MEMBERS = {
    *("list_variables", "inspect_variable", "dataframe", "memory", "variable_sizes", "source"),
    *("namespace_state", "fingerprint", "package_versions", "loaded_distributions"),
    *("preload", "seal", "sealed_fingerprint", "ask"),
}


def test_the_contract_is_the_documented_narrow_set() -> None:
    members = set(contract_members(KernelLike))
    assert members == KERNEL_MEMBERS
    assert len({m for m in members if not m.startswith("_")}) == 15
    assert set(contract_members(SnapshotsLike)) == SNAPSHOTS_MEMBERS
    assert set(contract_members(IntrospectionLike)) == INTROSPECTION_MEMBERS
    module_doc = inspect.getdoc(inspect.getmodule(KernelLike)) or ""
    documented = set(re.findall(r"`(\w+)`", module_doc.split("Three implementations")[0]))
    assert KERNEL_MEMBERS - {"__enter__", "__exit__"} <= documented, "the module docstring lists the members"


def test_no_kernel_re_exposes_a_part() -> None:
    """The parts' methods are reached through the parts: no one-line delegation is left on a kernel."""
    offered = {name for name in dir(Kernel) if not name.startswith("_")}
    assert offered & (SNAPSHOTS_MEMBERS | INTROSPECTION_MEMBERS | {"snapshot", "memory_bytes"}) == set()


def test_the_kernel_declares_every_member_of_the_contract(snapshot_dir: Path) -> None:
    """Unstarted, nothing runs: the class itself and its parts offer the contract (the properties of an
    unstarted kernel are not read)."""
    kernel = Kernel("local", snapshot_dir=snapshot_dir)
    assert broken_members(kernel, KernelLike) == []
    assert broken_members(kernel.snapshots, SnapshotsLike) == []
    assert broken_members(kernel.introspect, IntrospectionLike) == []


def test_a_part_that_drifts_from_the_contract_is_named() -> None:
    """The signature check itself: a part missing a method, or offering another signature, is reported."""

    class Drifted:
        def save(self) -> None: ...

        def restore(self, snapshot: str) -> None: ...

    broken = broken_members(Drifted(), SnapshotsLike)
    assert "workdir: missing" in broken and "files: missing" in broken and "set_files: missing" in broken
    assert any(line.startswith("save: ") for line in broken) and any(line.startswith("restore: ") for line in broken)


def test_the_kernels_are_composed_not_inherited() -> None:
    """No project class in a kernel's method resolution order but its own: its parts are members."""
    ours = [c for c in Kernel.__mro__ if c.__module__.startswith("themisto_env")]
    assert ours == [Kernel], Kernel.__mro__
    kernel = Kernel("local")
    assert {type(part).__name__ for part in vars(kernel).values()} >= {
        "KernelProcess",
        "KernelMessaging",
        "KernelSnapshots",
        "KernelIntrospection",
    }
    assert type(kernel.snapshots) is KernelSnapshots and type(kernel.introspect) is KernelIntrospection
