"""Kernels brought to recorded states.

Owns building a dataset by replaying sessions in kernels (``build``: each session by ``session_replay``,
on threads or Ray actors by ``build_workers`` and ``build_ray``), serving a sample's state by
restoring a snapshot or replaying recorded cells (``state``, with ``state_check`` and ``recorded_cells``),
running model-written code in disposable copies (``disposable``), finding or building a dataset and the
kernel environment it runs in (``resolve``), and opening one (``dataset``: [`Dataset`][themisto_env.replay.Dataset],
checked, cached per process, its samples listed without an env). Names are re-exported lazily: importing this
package starts and imports nothing.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
