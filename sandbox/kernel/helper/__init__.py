"""Helper code that runs *inside* the kernel, injected as source at kernel start.

It is installed as the module ``_themisto_helper`` in the kernel's ``sys.modules`` without binding any
name in the user namespace, and is called through ``user_expressions`` of a silent execute request, so
that introspection leaves the user's namespace, ``_``, ``Out`` and the execution counter untouched.
Every public function takes JSON-able keyword arguments and returns a JSON-able value; `call`
dispatches by name and returns a JSON string. A function declines with `Refused` (no such
variable, not a DataFrame, ...); the host raises ``UnknownNameError`` or ``IntrospectionRefused`` for it.
The host's models of the answers are in ``themisto_env.sandbox.kernel.answers``.

The helper is written in parts, a private module each (`PARTS`, in their order: the user's namespace, the
variables' views, the display options, fingerprints, snapshots, the random generators, the process state,
the calls), and sent to the kernel as ONE source (`helper_source`, built by
`themisto_env.sandbox.kernel.sources.assemble`): every kernel, started (`KernelMessaging.connect`) or forked
(its template installs the same source before forking), gets that whole source and nothing else. So the
parts stay self-contained (standard library; numpy, pandas and dill only when present): the kernel may run
in a container where themisto_env is not installed. The host reads the few names it shares with the helper
(``FINGERPRINT_VERSION``, ``OPTIONS_KEY``, ...) from this package's face.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
