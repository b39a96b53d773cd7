"""Datasets: finding one or building the bundled data on first use (``resolve``), opening it (``dataset``:
[`Dataset`][themisto_env.replay.Dataset], checked, cached per process, its samples listed without an env), and
exporting it (``dataset_export``). Names are re-exported lazily: importing this package starts nothing.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
