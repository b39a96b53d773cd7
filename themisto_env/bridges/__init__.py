"""Bridges to other frameworks: TRL single- and multi-turn (``rl``), inspect_ai (``inspect_task``,
``inspect_sandbox``).

Owns the adapters only: each takes the env, the dataset and the one scoring from the packages below and
speaks the other framework's contract. Their heavy dependencies (torch, trl, datasets, inspect_ai) are
imported on first use; the inspect names here are re-exported lazily (``pip install 'themisto-env[inspect]'``).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
