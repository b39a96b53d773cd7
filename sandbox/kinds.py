"""Every kind of kernel there is, as a factory the conformance suite runs on.

A kind is named ``BACKEND`` (a kernel started by the backend's launcher: ``local``, ``bwrap``, ``docker``),
or ``BACKEND-forked`` (forked from a kernel template of that backend). `open_kind` gives the `KernelKind`
(`themisto_env.sandbox.kernel.conformance`) and holds what its kernels need meanwhile (a template per store
access), closed when the block ends:

    >>> with open_kind("local-forked") as kind:
    ...     results = [run_check(check, kind) for check in checks_for(kind)]
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from themisto_env.errors import ConfigError
from themisto_env.sandbox.kernel.conformance import KernelFactory, KernelKind, StoreAccess
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.launcher import launcher_class
from themisto_env.sandbox.models import SandboxLimits

__all__ = ["HOW", "kind_name", "open_kind"]

#: How a kind's kernels are made: started by the backend's launcher, or forked from a template.
HOW = ("started", "forked")


def kind_name(backend: str, how: str = "started") -> str:
    """The name of a kind: ``local``, ``docker-forked``, ..."""
    return backend if how == "started" else f"{backend}-{how}"


@contextmanager
def open_kind(name: str, *, snapshot_dir: str | Path | None = None) -> Iterator[KernelKind]:
    """The kind of kernel ``name`` names, with what its kernels need held until the block ends.

    Args:
        name: ``BACKEND`` or ``BACKEND-forked`` (see the module docstring).
        snapshot_dir: The snapshot store of its kernels (default: the user's).

    Raises:
        ConfigError: The name is not a kind (an unknown backend is its own one-line error).
    """
    backend, _, how = name.partition("-")
    how = how or "started"
    if how not in HOW:
        raise ConfigError(f"no kind of kernel {name!r}: BACKEND or BACKEND-forked")
    launcher = launcher_class(backend)
    with ExitStack() as held:
        make = _forked(backend, snapshot_dir, held) if how == "forked" else _started(backend, snapshot_dir)
        yield KernelKind(name, make, isolated=launcher.isolated, enforces_limits=launcher.enforces_limits)


def _started(backend: str, snapshot_dir: str | Path | None) -> KernelFactory:
    from themisto_env.sandbox.kernel.core import Kernel

    def make(limits: SandboxLimits, store_access: StoreAccess) -> KernelLike:
        return Kernel(backend, limits=limits, snapshot_dir=snapshot_dir, store_access=store_access)

    return make


def _forked(backend: str, snapshot_dir: str | Path | None, held: ExitStack) -> KernelFactory:
    """Kernels forked from a template per store access, started at the first kernel asked for (docker copies
    are for model-written code only: copy-mode kernels whatever is asked)."""
    from themisto_env.sandbox.template.core import KernelTemplate
    from themisto_env.sandbox.template.launchers import ISOLATED_COPIES

    templates: dict[StoreAccess, KernelTemplate] = {}

    def make(limits: SandboxLimits, store_access: StoreAccess) -> KernelLike:
        access: StoreAccess = "copy" if backend in ISOLATED_COPIES else store_access
        if access not in templates:
            template = KernelTemplate(backend, snapshot_dir=snapshot_dir, store_access=access, spares=0)
            templates[access] = held.enter_context(template)
        return templates[access].kernel(limits=limits)

    return make
