"""One way to serve a state: a kernel in the state before a step of a trajectory, checked, and disposable
copies of it.

Owns [`StateProvider`][themisto_env.state.StateProvider] (``provider``): serve a sample's state, say how
([`StateReport`][themisto_env.state.StateReport], ``check``), hand out disposable copies for model-written
code (`DisposableKernels`, ``copies``), close. The routes are inside: forward replay and snapshot restore
(``kernel``), copies forked from a state's template and spares (``fork``), chosen from the kernel's spec.
Names are re-exported lazily: importing this package imports none of its modules.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
