"""What the host hears of a template's prebuild: the kernel application a template builds before forking.

A template that could not build it (a newer ipykernel or IPython, a kernel class or config of the user's) still
serves, each copy building its own application after the fork, slower. That is never silent: the host warns
with the template's cause (`PrebuildWarning`) and counts it (`prebuild_failures`, shown by ``themisto serve``'s
metrics as ``themisto_template_prebuild_failures_total``).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from themisto_env.errors import PrebuildWarning

__all__ = ["note_prebuild", "prebuild_failures"]

_LOCK = threading.Lock()
_FAILURES = [0]


def note_prebuild(answer: dict[str, Any], what: str) -> str | None:
    """Warn and count if a template's status answer says its prebuild failed; return the cause, or None.

    Args:
        answer: The template's answer to ``status``.
        what: The template, as the warning names it (``"the local kernel template"``).
    """
    cause = answer.get("prebuild_error")
    if not cause:
        return None
    with _LOCK:
        _FAILURES[0] += 1
    warnings.warn(
        PrebuildWarning(
            f"{what} could not build the kernel application before forking, so each copy builds its own after "
            f"the fork (slower): {cause}"
        ),
        stacklevel=3,
    )
    return str(cause)


def prebuild_failures() -> int:
    """How many templates of this process said their prebuild failed, since it started."""
    with _LOCK:
        return _FAILURES[0]
