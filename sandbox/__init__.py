"""Where code runs: Jupyter kernels on interchangeable backends (``local``, ``bwrap``, ``docker``).

Owns the kernel (:class:`Kernel`; like every name here, imported on first use), which drives a backend's
:class:`KernelLauncher` and speaks the Jupyter protocol; limits and results (``models``); Jupyter outputs
and their text (``outputs``, ``rendering``); snapshots, working folders, warm pools, the kernel image and
the in-kernel helper. The bottom layer: it imports no other part of themisto_env but the leaves (errors).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
