"""Development trajectories as records: what a person ran, in order, and the samples drawn from it.

Owns reading JuNE event logs (``june``) and saved notebooks (``notebook``) into sessions (``sessions``),
recording a live session (``recorder``, an IPython extension), the trajectory records and the dataset
folder's files (``trajectory``), replay agreement (``agreement``), the sample rule (``samples``) and a
dataset's figures (``stats``). Nothing here runs a kernel: replaying sessions is
[`themisto_env.replay`][themisto_env.replay]. Names are re-exported lazily: importing this package imports none of its
modules.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
