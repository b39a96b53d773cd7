"""The host's reaches into the Jupyter stack's private names: jupyter_core's per-thread loop and
jupyter_client's channel attributes, each with a fallback when a version has moved them.

Tested on jupyter_client 8.10.0 and jupyter_core 5.9.1 (requirements/lock.txt).
"""

from __future__ import annotations

import contextvars
from typing import Any

import jupyter_core.utils

__all__ = ["CHANNEL_NAMES", "opened_channels", "thread_loop_variable"]

#: jupyter_client's channels of a client, in its order.
CHANNEL_NAMES = ("shell", "iopub", "stdin", "control", "hb")


def thread_loop_variable() -> contextvars.ContextVar[Any] | None:
    """The context variable in which jupyter_core keeps "the thread's loop" for its blocking calls
    (``jupyter_core.utils._loop``), or None where a version keeps it otherwise.

    Tested on jupyter_core 5.9.1.
    """
    made = getattr(jupyter_core.utils, "_loop", None)
    return made if isinstance(made, contextvars.ContextVar) else None


def opened_channels(client: Any) -> list[Any] | None:
    """The channels a jupyter_client client has opened (``client._shell_channel`` ...: its properties open
    a channel when read), or None where a version lays them out otherwise (the shell's and iopub's missing).

    Tested on jupyter_client 8.10.0.
    """
    if not all(hasattr(client, f"_{name}_channel") for name in ("shell", "iopub")):
        return None
    channels = [getattr(client, f"_{name}_channel", None) for name in CHANNEL_NAMES]
    return [channel for channel in channels if channel is not None]
