"""Where code runs: Jupyter kernels on interchangeable backends (``local``, ``bwrap``, ``docker``).

The face lists the parts a caller uses ([`Kernel`][themisto_env.sandbox.Kernel],
[`KernelLike`][themisto_env.sandbox.KernelLike], [`KernelTemplate`][themisto_env.sandbox.KernelTemplate],
`KernelSpec`, limits and results), each imported on first use. The rooms: ``kernel/`` (a kernel and its
parts), ``template/`` (forked kernels), ``backends/``, ``image/``, ``ray/`` (reaching a Ray cluster),
``store/`` and ``lifetime/``. The bottom layer: it imports no other part of
themisto_env but the leaves (errors).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
