"""The package's version (``themisto_env.__version__``; pyproject's ``version`` says the same)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
