"""The in-kernel helper's one source: its parts, in their order, joined (see the package's docstring)."""

from __future__ import annotations

from functools import cache

from themisto_env.sandbox.kernel.sources import SHARED_PARTS, assemble

__all__ = ["PARTS", "helper_source"]

#: The helper's parts, each after the parts it imports from: the order of the one source (after the shared part
#: `themisto_env.sandbox.compat.in_kernel`, the only one that may use other libraries' private names).
PARTS = ("_namespace", "_variables", "_display", "_fingerprint", "_snapshots", "_randomness", "_process", "_calls")


@cache
def helper_source() -> str:
    """The in-kernel helper's one source, as every kernel gets it (its parts joined, with the package's
    docstring)."""
    return assemble("themisto_env.sandbox.kernel.helper", PARTS, shared=SHARED_PARTS)
