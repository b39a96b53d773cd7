"""Reaching Ray: one address syntax for every part that places work on a cluster.

``themisto run --ray`` and ``themisto data build --ray`` take the same addresses:

- ``local``: start a private Ray instance on this machine (shut down by whoever started it, or at exit);
- ``auto``: join the cluster this machine belongs to (after ``ray start --head`` or ``ray start --address``);
- ``HOST:6379``: a cluster's head node; ``ray://HOST:10001``: a cluster through Ray Client.

Ray is an optional dependency (``pip install 'themisto-env[ray]'``): nothing here imports it before it is
needed, and a missing Ray is one line saying how to install it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from themisto_env.errors import ConfigError, import_extra

__all__ = [
    "LOCAL",
    "OWNER_VARIABLES",
    "adopt_owner_variables",
    "connect",
    "import_ray",
    "interruptible_children",
    "owner_variables",
]

LOCAL = "local"
_connect_lock = threading.Lock()

#: Environment variables a kernel started in a Ray actor takes from its driver rather than from Ray: Ray sets
#: ``OMP_NUM_THREADS=1`` in its actors, and a kernel inheriting it computes some results otherwise than one
#: started by the owner (scikit-learn's nearest neighbours break distance ties by thread count: a replayed
#: cell's output then differs from the recorded one).
OWNER_VARIABLES = ("OMP_NUM_THREADS",)


def owner_variables() -> dict[str, str | None]:
    """This process's values of `OWNER_VARIABLES` (None: unset), to hand to an actor."""
    return {name: os.environ.get(name) for name in OWNER_VARIABLES}


def adopt_owner_variables(values: dict[str, str | None]) -> None:
    """In an actor: set (or unset) the owner's values, so the kernels it starts inherit them."""
    for name, value in values.items():
        if name not in OWNER_VARIABLES:
            continue
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def import_ray() -> Any:
    """The ``ray`` module, or a ProviderError saying how to install it."""
    return import_extra("ray", "ray", name="Ray")


def connect(address: str, *, num_cpus: int | None = None) -> bool:
    """Connect this process to Ray: start a local instance for ``local``, else join ``address``; nothing
    when it is connected already (to whatever cluster: the first connection of a process wins).

    Args:
        address: ``local``, ``auto`` or a cluster address.
        num_cpus: CPUs a local instance offers (default: this machine's; more when asked).

    Returns:
        Whether this call started (and so may shut down) the Ray connection.

    Raises:
        ConfigError: No address given.
        ProviderError: Ray is not installed.
    """
    ray = import_ray()
    with _connect_lock:
        if ray.is_initialized():
            return False
        if not address:
            raise ConfigError("ray: give 'local', 'auto' or a cluster address (HOST:6379, ray://HOST:10001)")
        kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        if address == LOCAL:
            cpus = max(num_cpus or 0, os.cpu_count() or 1)
            ray.init(num_cpus=cpus, include_dashboard=False, **kwargs)
        else:
            ray.init(address=address, **kwargs)
        return True


@contextlib.contextmanager
def interruptible_children() -> Iterator[None]:
    """In an actor: let the processes started in the block (kernels) receive SIGINT.

    Ray's workers block SIGINT in their signal mask, and a child process inherits the mask (of the thread
    that starts it): a kernel started from an actor as it is never sees an interrupt, neither a recorded
    ``KeyboardInterrupt`` nor a time limit's (it is restarted instead, and its state is lost).
    """
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
