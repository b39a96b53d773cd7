"""The display options of pandas and numpy a cell may change: read them, set them (a restore does).

A part of the in-kernel helper (see `themisto_env.sandbox.kernel.helper`): sent to the kernel as one source with
the other parts, it imports only the standard library and names of the parts before it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from themisto_env.sandbox.compat.in_kernel import pandas_options

#: numpy's default print options (those a cell may change; others are ignored).
_NUMPY_PRINT_DEFAULTS = {
    "edgeitems": 3,
    "threshold": 1000,
    "floatmode": "maxprec",
    "precision": 8,
    "suppress": False,
    "linewidth": 75,
    "nanstr": "nan",
    "infstr": "inf",
    "sign": "-",
    "formatter": None,
}


#: Where a snapshot keeps the display options, and the fingerprint's entry for them (not a Python name:
#: never a user's variable). Restores set them; they change what tools and outputs print.
OPTIONS_KEY = "<display options>"


def _display_options() -> dict[str, dict[str, Any]]:
    """The display options of pandas and numpy that differ from their defaults."""
    options: dict[str, dict[str, Any]] = {}
    pd = sys.modules.get("pandas")
    registered = pandas_options(pd)
    if pd is not None and registered is not None:
        for key in sorted(k for k in registered if k.startswith("display.")):
            with contextlib.suppress(Exception):
                value = pd.get_option(key)
                if value != registered[key].defval:
                    options.setdefault("pandas", {})[key] = value
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            printing = np.get_printoptions()
            changed = {k: printing[k] for k, v in _NUMPY_PRINT_DEFAULTS.items() if k in printing and printing[k] != v}
            if changed:
                options["numpy"] = changed
    return options


def set_display_options(options: dict[str, dict[str, Any]]) -> None:
    """Make the display options exactly these (the rest at their defaults), where the module is loaded
    or named in ``options``."""
    if "pandas" in options or "pandas" in sys.modules:
        import pandas as pd

        registered = pandas_options(pd) or {}
        for key in [k for k in registered if k.startswith("display.")]:
            want = options.get("pandas", {}).get(key, registered[key].defval)
            with contextlib.suppress(Exception):
                if pd.get_option(key) != want:
                    pd.set_option(key, want)
    if "numpy" in options or "numpy" in sys.modules:
        import numpy as np

        with contextlib.suppress(Exception):
            np.set_printoptions(**{**_NUMPY_PRINT_DEFAULTS, **options.get("numpy", {})})
