"""Datasets: their build, their kernel environments, finding and opening them.

Owns building a dataset by replaying sessions in kernels (``build``: each session by ``session_replay``,
on threads or Ray actors by ``build_workers`` and ``build_ray``; a recorded cell run as recorded by
``recorded_cells``), the kernel environments that pin the
packages a replay runs with (``kernel_environments`` and its ``kernel_environment_*`` parts), finding or
building a dataset (``resolve``) and opening one (``dataset``: [`Dataset`][themisto_env.replay.Dataset],
checked, cached per process, its samples listed without an env). Names are re-exported lazily: importing this
package starts and imports nothing.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
