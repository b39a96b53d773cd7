"""Datasets, and kernels brought to their recorded states.

Opens a dataset (``dataset``: [`Dataset`][themisto_env.replay.Dataset], checked, cached per process, its samples
listed without an env), finds it or builds the bundled data on first use (``resolve``, over
`themisto_env.build`) and exports it (``dataset_export``); serves a sample's state by restoring a snapshot or
replaying recorded cells (``state``, with ``state_check`` and ``recorded_cells``) and runs model-written code in
disposable copies (``disposable``). Names are re-exported lazily: importing this package starts and imports nothing.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
