"""The ``themisto`` command's groups and commands, a module each; `themisto_env.cli` assembles them.

- ``common``: the console and the options several commands share.
- ``sandbox``: ``themisto sandbox`` (build-image, check, gc).
- ``kernel_environments``: ``themisto kernel-env`` (create, list, rm).
- ``data``: ``themisto data`` (build, info).
- ``run``: ``themisto run`` and its summary table, ``themisto agents``.
- ``results``: ``themisto compare``, ``report`` and ``view``.
"""

from __future__ import annotations

__all__: list[str] = []
