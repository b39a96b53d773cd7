"""The dataset build: sessions replayed in kernels into a dataset folder (``themisto data build``).

``builder`` writes the folder (``build_dataset``), handing each session to ``session_replay`` (its cells run
``as_recorded``, compared by ``second_replay``, figures kept by ``figures``) here, on threads (``workers``) or on
Ray actors (``ray_workers``); ``session_sources`` reads the logs and notebooks, ``timing`` the build's figures, and
``folder_build`` builds a folder of notebooks, a kernel environment per project (``project_packages``). Names are
re-exported lazily: importing this package starts and imports nothing.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
