"""The Docker engine: a client, whether it answers, one-line errors when it does not, and its images.

Every docker SDK call of the sandbox goes through `docker_client` (a client whose engine answered a
ping) and, around calls that may fail on the way to the engine, `engine`: an unreachable engine
becomes [`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] with one line that says how to start
one, while the engine's own answers (``NotFound``, ``APIError``) pass through.

The docker SDK is imported only inside the functions; importing this module has no side effects.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.lifetime.leftovers import engine_unreachable

__all__ = ["docker_client", "engine", "engine_address", "image_exists", "image_id", "unreachable"]


def engine_address(client: Any = None) -> str:
    """The Docker engine a client talks to (without one: ``DOCKER_HOST``, else the default socket)."""
    api = getattr(client, "api", None)
    socket_path = getattr(getattr(api, "_custom_adapter", None), "socket_path", None)
    if socket_path:
        return f"unix://{socket_path}"
    base_url = str(getattr(api, "base_url", "") or "")
    if base_url and not base_url.startswith("http+docker://"):
        return base_url
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _short_reason(exc: BaseException) -> str:
    """The root cause of an SDK or requests error in a few words (``Connection refused``, ...)."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.strerror:
            return str(item.strerror)
        todo += [*item.args, item.__cause__, item.__context__]
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


def unreachable(exc: BaseException, client: Any = None) -> BackendUnavailableError:
    """The one-line error for an engine that does not answer."""
    reason = _short_reason(exc)
    if "ermission denied" in reason:
        fix = "add your user to the `docker` group (or run as root)"
    else:
        fix = (
            "start it with `dockerd >/var/log/dockerd.log 2>&1 &` as root, `systemctl start docker`, "
            "or `.ci/setup-docker.sh`"
        )
    return BackendUnavailableError(f"the Docker engine at {engine_address(client)} is not reachable: {reason}; {fix}")


@contextlib.contextmanager
def engine(client: Any = None) -> Iterator[None]:
    """Around docker SDK calls: an unreachable engine becomes
    [`BackendUnavailableError`][themisto_env.errors.BackendUnavailableError] (one line); the engine's own answers
    (``NotFound``, ``APIError``) pass through."""
    try:
        yield
    except Exception as exc:
        if engine_unreachable(exc):
            raise unreachable(exc, client) from exc
        raise


def docker_client() -> Any:
    """A ``docker.DockerClient`` for the engine in the environment (``DOCKER_HOST`` or the socket).

    Raises:
        BackendUnavailableError: No engine answers; the message says how to start one.
    """
    import docker
    import docker.errors

    try:
        client = docker.from_env()
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise unreachable(exc) from exc
    return client


def image_exists(client: Any, name: str) -> bool:
    """Whether the engine behind ``client`` (a ``docker.DockerClient``) has image ``name``."""
    return image_id(client, name) is not None


def image_id(client: Any, name: str) -> str | None:
    """The id of image ``name`` on the engine behind ``client``, or None if it has none."""
    import docker.errors

    try:
        return str(client.images.get(name).id)
    except docker.errors.ImageNotFound:
        return None
