"""The process's shared kernel templates: one per `KernelSpec`, started on first use, held by the envs and
disposable kernels that fork from them, and closed at exit (a template in a container of its own: when the
last holder is done)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Unpack

from themisto_env.sandbox.kernel.spec import KernelFields, KernelSpec
from themisto_env.sandbox.template.core import KernelTemplate

__all__ = [
    "close_shared_templates",
    "hold_shared_templates",
    "live_shared_templates",
    "release_shared_templates",
    "shared_template",
    "template_source",
]

_SHARED: dict[KernelSpec, KernelTemplate] = {}
_SHARED_LOCK = threading.Lock()


def shared_template(spec: KernelSpec | str, /, **fields: Unpack[KernelFields]) -> KernelTemplate:
    """The process's template for this kind of kernel (a `KernelSpec`, or a backend's name with ``fields``),
    started on first use and replaced when it is gone (killed, crashed); closed at exit. Envs, disposable
    kernels and servers of one spec share it: equal specs, one template.

    Raises:
        KernelStartError: It could not be started (the caller starts its kernels instead).
    """
    spec = KernelSpec.of(spec, **fields)
    with _SHARED_LOCK:
        template = _SHARED.get(spec)
        if template is not None and template.is_alive():
            return template
        if template is not None:
            template.close()
        template = KernelTemplate(spec)
        # started under the lock: another thread must not take a template still starting for a dead one
        template.start()
        _SHARED[spec] = template
    return template


def template_source(spec: KernelSpec) -> Callable[[], KernelTemplate] | None:
    """Gives the process's shared template of ``spec`` (`shared_template`), or None where kernels of that
    spec are not forked (`KernelSpec.not_forked` says why)."""
    return None if spec.not_forked is not None else functools.partial(shared_template, spec)


_USERS = 0  # open envs (or other holders) that fork from the shared templates


def hold_shared_templates() -> None:
    """Say that one more holder (an env) forks from the process's shared templates."""
    global _USERS
    with _SHARED_LOCK:
        _USERS += 1


def release_shared_templates() -> None:
    """Say that a holder is done. When none is left, the shared templates drop their spare kernels and their
    state templates: an idle process keeps only the warm templates that run in it (local, bwrap: no kernel),
    and closes those that run in a container of their own (docker), which would outlive every env that used
    them until the process ends (the next holder starts a new one)."""
    global _USERS
    with _SHARED_LOCK:
        _USERS = max(0, _USERS - 1)
        idle = list(_SHARED.items()) if _USERS == 0 else []
        contained = [spec for spec, _ in idle if spec.backend == "docker"]
        for spec in contained:
            del _SHARED[spec]
    for spec, template in idle:
        if spec in contained:
            template.close()
        else:
            template.trim()


def live_shared_templates() -> tuple[int, int]:
    """How many of the process's shared templates run, and how many state templates (a snapshot loaded,
    copies forked from it) run under them."""
    with _SHARED_LOCK:
        templates = list(_SHARED.values())
    kernels = states = 0
    for template in templates:
        if not template.is_alive():
            continue
        kernels += 1
        states += template.live_states()
    return kernels, states


def close_shared_templates() -> None:
    """Close the process's shared templates now (they are closed at exit anyway); the next
    `shared_template` starts a new one."""
    with _SHARED_LOCK:
        templates = list(_SHARED.values())
        _SHARED.clear()
    for template in templates:
        template.close()
