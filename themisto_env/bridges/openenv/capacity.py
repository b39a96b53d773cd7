"""How many sessions one ``themisto serve`` can hold on this machine, and the descriptor limit they need.

An open session holds a forked kernel (its private pages; the template's pages are shared by all of them),
its share of the state templates, and in the server a WebSocket, the kernel client's two zmq sockets and a
pidfd. `session_capacity` divides what the machine has (``MemAvailable``, the soft ``RLIMIT_NOFILE``)
by what a session takes (`SESSION_PSS_MIB`, `DESCRIPTORS_PER_SESSION`); `raise_open_file_limit` lifts the
soft descriptor limit to the hard one first, where the process may.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DESCRIPTORS_PER_SESSION",
    "SESSION_PSS_MIB",
    "SessionCapacity",
    "raise_open_file_limit",
    "session_capacity",
]

#: PSS per open session (MiB): the server and its descendants, tools mode, bundled data, local backend,
#: each session at its own sample, rounded up (measured by benchmarks/bench_sessions.py; figures in
#: benchmarks/README.md).
SESSION_PSS_MIB = 30.0
#: The server's open descriptors per open session, rounded up (measured likewise): a WebSocket, two zmq
#: sockets and their signalling descriptors, a pidfd.
DESCRIPTORS_PER_SESSION = 7


def raise_open_file_limit() -> tuple[int, int]:
    """Lift this process's soft ``RLIMIT_NOFILE`` to its hard limit (an unprivileged process may).

    Returns:
        The soft limit before and after (equal where it could not be raised or already was the hard one).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, hard


def _available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class SessionCapacity:
    """How many sessions fit, by memory and by descriptors.

    Attributes:
        by_memory: Sessions the available memory holds (None where it cannot be read).
        by_descriptors: Sessions the soft descriptor limit holds.
        available_bytes: The machine's available memory (``MemAvailable``).
        descriptor_limit: The process's soft ``RLIMIT_NOFILE``.
        session_mib: The PSS per session the estimate uses.
    """

    by_memory: int | None
    by_descriptors: int
    available_bytes: int | None
    descriptor_limit: int
    session_mib: float

    @property
    def sessions(self) -> int:
        """The smaller of the two bounds."""
        return min(self.by_descriptors, self.by_memory if self.by_memory is not None else self.by_descriptors)

    def text(self) -> str:
        """One line for the server's start."""
        memory = (
            f"{self.by_memory} in memory ({self.available_bytes / 2**30:.1f} GiB available, "
            f"about {self.session_mib:.0f} MiB each)"
            if self.by_memory is not None and self.available_bytes is not None
            else "memory unknown"
        )
        return (
            f"sessions that fit on this machine: about {self.sessions} ({memory}; {self.by_descriptors} by the "
            f"descriptor limit of {self.descriptor_limit})"
        )


def session_capacity(
    session_mib: float = SESSION_PSS_MIB, descriptors_per_session: int = DESCRIPTORS_PER_SESSION
) -> SessionCapacity:
    """How many sessions fit in the machine's available memory and in this process's descriptor limit."""
    available = _available_bytes()
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 1 << 20 if soft == resource.RLIM_INFINITY else soft
    reserve = 256  # the server's own descriptors: its libraries, listening socket, templates, logs
    return SessionCapacity(
        by_memory=int(available // (session_mib * 2**20)) if available is not None else None,
        by_descriptors=max(0, (limit - reserve) // descriptors_per_session),
        available_bytes=available,
        descriptor_limit=limit,
        session_mib=session_mib,
    )
