"""Bridges to other frameworks: TRL and gymnasium vector envs (``rl``), inspect_ai (``inspect_task``,
``inspect_sandbox``).

Owns the adapters only: each takes the env, the dataset and the one scoring from the packages below and
speaks the other framework's contract. Their heavy dependencies (torch, trl, datasets, inspect_ai) are
imported on first use; the inspect names here are re-exported lazily (``pip install 'themisto-env[inspect]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from themisto_env._lazy import lazy_exports

if TYPE_CHECKING:
    from themisto_env.bridges.inspect_sandbox import ThemistoSandbox
    from themisto_env.bridges.inspect_task import themisto

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "themisto_env.bridges.inspect_sandbox": ("ThemistoSandbox",),
        "themisto_env.bridges.inspect_task": ("themisto",),
    },
)

__all__ = ["ThemistoSandbox", "themisto"]
