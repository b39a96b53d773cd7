"""Helper code that runs *inside* the kernel, injected as source at kernel start.

It is installed as the module ``_themisto_helper`` in the kernel's ``sys.modules`` without binding any
name in the user namespace, and is called through ``user_expressions`` of a silent execute request, so
that introspection leaves the user's namespace, ``_``, ``Out`` and the execution counter untouched.
Every public function takes JSON-able keyword arguments and returns a JSON-able value; `call`
(in `calls`) dispatches by name and returns a JSON string. A function declines with `Refused` (no such
variable, not a DataFrame, ...); the host raises ``UnknownNameError`` or ``IntrospectionRefused`` for it.
The host's models of the answers are in ``themisto_env.sandbox.kernel.answers``.

The helper is written in parts, one module each (`PARTS`, in their order), and sent to the kernel as ONE
source (`helper_source`, built by `themisto_env.sandbox.kernel.sources.assemble`): every kernel, started
(`KernelMessaging.connect`) or forked (the template installs it before forking), gets that whole source and
nothing else, so the parts must stay self-contained (standard library; numpy, pandas and dill only when
present): the kernel may run in a container where themisto_env is not installed. The host imports the parts'
constants and pure functions from their homes (``FINGERPRINT_VERSION`` in `fingerprint`, ...).
"""

from __future__ import annotations

from functools import cache

from themisto_env.sandbox.kernel.sources import assemble

__all__ = ["PARTS", "helper_source"]

#: The helper's parts, each after the parts it imports from: the order of the one source.
PARTS = ("namespace", "variables", "display", "fingerprint", "snapshots", "randomness", "process", "calls")


@cache
def helper_source() -> str:
    """The in-kernel helper's one source, as every kernel gets it (its parts joined: see the module's docstring)."""
    return assemble(__name__, PARTS)
