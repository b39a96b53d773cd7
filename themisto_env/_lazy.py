"""Lazy re-exports for the packages' ``__init__`` modules (PEP 562).

A package lists the names it re-exports by the module that defines them; a name is imported from its module
on first use and then kept on the package, so ``import themisto_env.data`` stays cheap and free of side
effects while ``from themisto_env.data import Trajectory`` works. Type checkers see the same names through
the package's ``if TYPE_CHECKING:`` imports (tests/test_public_api.py checks that both lists agree).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a package that re-exports names lazily.

    Args:
        package: The package's ``__name__``.
        exports: For each defining module (absolute name), the names the package re-exports from it.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level.
    """
    home = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup is an ordinary attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(home))

    return __getattr__, __dir__
