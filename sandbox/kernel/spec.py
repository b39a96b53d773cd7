"""What kind of kernel to make: `KernelSpec`, one frozen value that every factory, pool and template takes
and is keyed by.

A spec names the backend, the limits, the snapshot store and how the kernel sees it, the kernel
environment, the modules to preload, the backend's launcher options, whether kernels of this kind may be
forked from a template and how many an owner keeps warm. It is the env's ``kernel`` option
(``gym.make(id, kernel=KernelSpec("docker"))``), completed once by its owner (the env adds its dataset's
environment and imports) and handed down: `Kernel`, `KernelTemplate`, `shared_template`, `shared_pool` and
the disposable kernels all take it, and two equal specs share one template and one pool. The fork policy
(`KernelSpec.not_forked`) lives here too, so that every user of a spec forks, or does not, for the same
reason.

Example:
    >>> spec = KernelSpec("local", preload=("pandas",))
    >>> spec.with_access("copy") == KernelSpec("local", preload=("pandas",), store_access="copy")
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import ConfigDict, NonNegativeInt

from themisto_env.sandbox.models import SandboxLimits

__all__ = ["FORKING_BACKENDS", "KernelFields", "KernelSpec", "StoreAccess"]

#: Backends whose kernels can be forked from a template.
FORKING_BACKENDS = ("local", "bwrap", "docker")

#: How a kernel sees the snapshot store: ``read`` (mounted read-only) or ``copy`` (not at all: each
#: snapshot to restore is copied in).
StoreAccess = Literal["read", "copy"]


class KernelFields(TypedDict, total=False):
    """The fields of a `KernelSpec` but its backend, as keyword arguments: what the public constructors
    (`Kernel("docker", limits=...)`, `KernelTemplate`, ...) accept beside a backend's name or over a spec
    (see `KernelSpec.of`)."""

    limits: SandboxLimits | None
    snapshot_dir: str | Path | None
    store_access: StoreAccess
    environment: str | None
    preload: Sequence[str]
    launcher_options: Mapping[str, Any] | None
    fork: bool | None
    warm_kernels: int


@dataclass(frozen=True)
class KernelSpec:
    """What kind of kernel to make (frozen and hashable: pools and templates are keyed by it).

    Attributes:
        backend: ``local`` (not isolated), ``bwrap`` or ``docker``.
        limits: Per-execution and per-kernel limits.
        snapshot_dir: The snapshot store (content-addressed); None: the user cache's.
        store_access: How the kernel sees the store. ``read``: mounted read-only; ``copy``: not mounted,
            each snapshot to restore is copied into the kernel's run directory and removed once loaded (for
            kernels that run model-written code, which must not read the states of later steps).
        environment: A kernel environment's id (``themisto kernel-env create``); None: the tool's own
            Python (or the default image). The store restores only snapshots written in it.
        preload: Modules imported once a kernel (or a template) starts; missing ones are skipped.
        launcher_options: Extra keyword arguments for the backend's launcher (e.g. ``image`` for docker),
            as sorted ``(name, value)`` pairs (a mapping given is sorted so).
        fork: Whether kernels of this kind may be forked from a template (see `not_forked` for where
            they are not, fork or no fork); None: the owner's default (the env forks, a bare kernel does
            not).
        warm_kernels: Started kernels an owner keeps ready (the env's pool; 0 starts each kernel when
            needed). Not part of the kind: two specs differing only here are equal.
    """

    # a `kernel:` block of a config file is validated into a spec: an unknown key is an error
    __pydantic_config__ = ConfigDict(extra="forbid")

    backend: str = "local"
    limits: SandboxLimits = dataclasses.field(default_factory=SandboxLimits)
    snapshot_dir: str | None = None
    store_access: StoreAccess = "read"
    environment: str | None = None
    preload: tuple[str, ...] = ()
    launcher_options: tuple[tuple[str, Any], ...] = ()
    fork: bool | None = None
    warm_kernels: NonNegativeInt = dataclasses.field(default=1, compare=False)

    def __post_init__(self) -> None:
        # normalized, so that equal kernels make equal specs (and one key)
        set_ = object.__setattr__
        if self.limits is None:
            set_(self, "limits", SandboxLimits())
        if self.snapshot_dir is not None and not isinstance(self.snapshot_dir, str):
            set_(self, "snapshot_dir", str(self.snapshot_dir))
        if not isinstance(self.preload, tuple):
            set_(self, "preload", tuple(self.preload))
        options: Any = self.launcher_options
        if options is None:
            set_(self, "launcher_options", ())
        elif isinstance(options, Mapping):
            set_(self, "launcher_options", tuple(sorted(options.items())))

    @classmethod
    def of(cls, spec: KernelSpec | str = "local", /, **fields: Any) -> KernelSpec:
        """``spec`` itself, a spec of the backend named ``spec``, either with ``fields`` replaced
        (`KernelFields`: the keyword arguments of the public constructors)."""
        if isinstance(spec, str):
            return cls(spec, **fields)
        return dataclasses.replace(spec, **fields) if fields else spec

    def with_access(self, store_access: StoreAccess) -> KernelSpec:
        """The same spec with another store access (the env's kernels read the store; the kernels of
        model-written code get copies)."""
        return self if store_access == self.store_access else dataclasses.replace(self, store_access=store_access)

    @property
    def options(self) -> dict[str, Any]:
        """The launcher options as a dict."""
        return dict(self.launcher_options)

    @property
    def not_forked(self) -> str | None:
        """Why kernels of this spec are started rather than forked from a template, or None where they are
        forked.

        Kernels for model-written code (``store_access="copy"``) are forked on ``local`` (no isolation
        anyway), on ``docker``, where each copy takes a uid of its own in its template's container, and on
        ``bwrap``, where each copy takes user, pid, mount, network and IPC namespaces of its own inside its
        template's sandbox; where the host refuses nested user namespaces
        (`themisto_env.sandbox.kernel.copy_namespaces.nested_namespaces_refused` says why), each bwrap kernel for
        model-written code is started in a sandbox of its own. The env's own kernel (``read``) is forked on
        ``local`` and ``bwrap``, started on ``docker``.
        """
        if not self.fork:
            return "fork=False"
        if self.backend not in FORKING_BACKENDS:
            return f"the {self.backend} backend does not fork"
        if self.store_access == "copy" and self.backend == "bwrap":
            from themisto_env.sandbox.kernel.copy_namespaces import nested_namespaces_refused

            refused = nested_namespaces_refused()
            if refused is not None:
                return f"bwrap copies cannot isolate themselves: {refused}; model-written code gets a sandbox each"
        if self.store_access == "read" and self.backend == "docker":
            return "the env's own docker kernel is started (only model-written code is forked on docker)"
        return None

    @property
    def forks(self) -> bool:
        """Whether kernels of this spec are forked from a template (`not_forked` is None)."""
        return self.not_forked is None
