"""Where code runs: Jupyter kernels on interchangeable backends (``local``, ``bwrap``, ``docker``).

The face lists the parts a caller uses ([`Kernel`][themisto_env.sandbox.Kernel],
[`KernelLike`][themisto_env.sandbox.KernelLike] with its parts' contracts (`SnapshotsLike`, `IntrospectionLike`),
[`make_kernel`][themisto_env.sandbox.make_kernel],
[`KernelTemplate`][themisto_env.sandbox.KernelTemplate], `KernelSpec` (what kind of kernel: every factory takes one),
limits and results; each imported on first use). The rooms:

- ``kernel/``: a kernel and its parts (process, messaging, snapshots, introspection, the in-kernel helper),
  the contract, the kernel spec, launchers, forked kernels, warm pools and the conformance suite;
- ``template/``: kernel templates, the zygote that forks their copies, and the docker backend's template;
- ``backends/``: the ``local``, ``bwrap`` and ``docker`` launchers and the kernel containers;
- ``image/``: the kernel container image (package set, build, Debian base); ``engine``: the Docker engine;
- ``ray/``: kernels on Ray; ``store/``: snapshot files and working folders; ``lifetime/``: owners and the
  reaper;
- ``models``, ``outputs``, ``rendering``, ``environments``: what crosses the boundary; ``kinds``: every kind
  of kernel (started, forked, on Ray) as a factory the conformance suite runs on.

The bottom layer: it imports no other part of themisto_env but the leaves (errors).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
