"""``themisto serve``: the env as an OpenEnv server (``openenv-core``'s FastAPI app, not a protocol of ours).

Endpoints are OpenEnv's: ``/ws`` (a WebSocket session is one episode with its own kernel; the client is
[`ThemistoEnvClient`][themisto_env.bridges.openenv.ThemistoEnvClient]), ``/health``, ``/schema``,
``/metadata``, ``/state`` and the stateless ``/reset`` and ``/step``. Ours are ``/metrics``
(`themisto_env.bridges.openenv.server_metrics`), ``/mcp`` (`themisto_env.bridges.mcp`), a bearer token, a
cap on sessions at once with an idle timeout, and one shared pool of threads for the sessions' calls
(`SessionServer`). What each does, and the errors: docs/serving.md.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig

from themisto_env.bridges.gate import Gate, check_bind
from themisto_env.bridges.openenv.environment import ThemistoServedEnv
from themisto_env.bridges.openenv.models import ThemistoAction, ThemistoObservation
from themisto_env.bridges.openenv.server_metrics import ServerMetrics, add_metrics_route
from themisto_env.env.episode import Episode
from themisto_env.errors import ConfigError, InfrastructureError, ThemistoError

__all__ = ["DEFAULT_WORKERS", "SessionServer", "create_server_app", "serve"]

log = logging.getLogger("themisto_env")

DEFAULT_WORKERS = 64
"""The shared pool's threads unless told (and never more than ``max_sessions``): calls at once past a few
per core wait on their kernels, not on the CPU (benchmarks/README.md, "Sessions per node")."""


class SessionServer(HTTPEnvServer):
    """OpenEnv's server (``HTTPEnvServer``) with its WebSocket sessions' calls on one shared pool.

    OpenEnv gives each WebSocket session a ``ThreadPoolExecutor(max_workers=1)`` of its own (its thread,
    once started, stays until the session ends: 500 idle sessions, 500 idle threads), unless the server
    holds a shared session executor (its ``_shared_session_executor``, made for envs that need one
    thread): then every session's factory, ``reset``, ``step`` and ``close`` run there, and a session's end
    does not shut it down. Here that executor is a pool of at most ``workers`` threads, started only when a
    call finds none idle: the threads grow with the calls at once, never with the sessions open. A
    session's calls still run one at a time (its WebSocket handler awaits each), on whichever thread is
    free: our episodes do not keep to a thread (jupyter_client's loop is bound per thread at each call).
    Past ``workers`` calls at once (a long cell in each), the next call waits for a thread.

    A session in the middle of a call is not idle: OpenEnv's reaper times idleness from the end of the last
    call (or the connect), so a reset slower than the idle timeout was closed under its caller. The reaper
    passes over such a session; its idle time starts again when the call ends.

    Args:
        env: The env factory (OpenEnv's ``env``).
        action_cls: The action model.
        observation_cls: The observation model.
        workers: The shared pool's threads at most (at least 1).
        concurrency_config: OpenEnv's (``max_concurrent_envs``, ``session_timeout``).
    """

    def __init__(
        self,
        env: Callable[[], ThemistoServedEnv],
        action_cls: type[ThemistoAction],
        observation_cls: type[ThemistoObservation],
        *,
        workers: int,
        concurrency_config: ConcurrencyConfig,
    ) -> None:
        super().__init__(env, action_cls, observation_cls, concurrency_config=concurrency_config)
        self._calling: Counter[str] = Counter()  # the calls in progress per session (the reaper spares them)
        if not hasattr(self, "_shared_session_executor"):  # openenv-core changed: say so, keep its executors
            log.warning("openenv-core has no shared session executor: each session keeps a thread of its own")
            return
        self._shared_session_executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="themisto-session")

    async def _run_in_session_executor(
        self, session_id: str, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        self._calling[session_id] += 1
        try:
            return await super()._run_in_session_executor(session_id, func, *args, **kwargs)
        finally:
            self._calling[session_id] -= 1
            if not self._calling[session_id]:
                del self._calling[session_id]
            self._update_session_activity(session_id)

    async def _destroy_session(self, session_id: str) -> None:
        # Only the reaper comes here mid-call: a WebSocket's own end waits for its call to return first.
        if self._calling.get(session_id):
            return
        await super()._destroy_session(session_id)


def create_server_app(
    options: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = 32,
    idle_timeout_s: float | None = 600.0,
    token: str | None = None,
    workers: int | None = None,
) -> Any:
    """The server's ASGI app (the FastAPI app behind a `Gate`).

    Args:
        options: The env's options for every session ([`EnvConfig`][themisto_env.env.EnvConfig]); they
            are checked here, once, by making (and closing) an episode: no kernel starts.
        max_sessions: WebSocket sessions at once (TRL asks for at least ``generation_batch_size``).
        idle_timeout_s: Close a session idle this long (None: never).
        token: Require ``Authorization: Bearer TOKEN`` on every request but ``/health``.
        workers: Threads that run the sessions' calls, shared (`SessionServer`; None:
            ``min(max_sessions, DEFAULT_WORKERS)``).

    Raises:
        ConfigError: Bad options (or a dataset that cannot be opened: DataError).
    """
    options = dict(options or {})
    if max_sessions < 1:
        raise ConfigError(f"--max-sessions is at least 1, got {max_sessions}")
    if idle_timeout_s is not None and idle_timeout_s <= 0:
        raise ConfigError(f"--idle-timeout is a positive number of seconds, got {idle_timeout_s}")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers is at least 1, got {workers}")
    Episode.open(**options).close()  # bad options and data fail here, in one line, before anything listens
    sessions: weakref.WeakSet[ThemistoServedEnv] = weakref.WeakSet()
    lock = threading.Lock()
    metrics = ServerMetrics(max_sessions=max_sessions, sessions=lambda: env_server.active_sessions)

    def factory() -> ThemistoServedEnv:
        env = ThemistoServedEnv(options, metrics=metrics)
        with lock:
            sessions.add(env)
        return env

    env_server = SessionServer(  # OpenEnv's, as create_fastapi_app makes it: it counts the sessions open
        factory,  # OpenEnv makes (cheap: no episode yet) and closes one to read SUPPORTS_CONCURRENT_SESSIONS
        ThemistoAction,
        ThemistoObservation,
        workers=workers or min(max_sessions, DEFAULT_WORKERS),
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
    )
    app = FastAPI(title="themisto-env (OpenEnv)")
    env_server.register_routes(app)
    add_metrics_route(app, metrics)
    from themisto_env.bridges.mcp.app import episode_endpoint
    from themisto_env.bridges.mcp.transports import mount_mcp

    mount_mcp(
        app, episode_endpoint(options, idle_timeout_s=idle_timeout_s, host="", workers=workers or DEFAULT_WORKERS)
    )

    @app.exception_handler(ThemistoError)
    async def _themisto_error(request: Request, exc: ThemistoError) -> JSONResponse:
        status = 503 if isinstance(exc, InfrastructureError) else 400
        return JSONResponse({"detail": f"{type(exc).__name__}: {' '.join(str(exc).split())}"}, status_code=status)

    async def _close_sessions() -> None:  # the sessions still open when the server stops
        with lock:
            left = list(sessions)
        await asyncio.gather(*(asyncio.to_thread(env.close) for env in left), return_exceptions=True)

    # first: OpenEnv's own shutdown then waits for the shared pool's calls, which end with their kernels
    app.router.on_shutdown.insert(0, _close_sessions)

    return Gate(app, token)


def serve(
    options: Mapping[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 32,
    idle_timeout_s: float | None = 600.0,
    token: str | None = None,
    workers: int | None = None,
    log_level: str = "info",
) -> None:
    """Run the server until interrupted (uvicorn). See
    [`create_server_app`][themisto_env.bridges.openenv.create_server_app] for the arguments.

    Raises:
        ConfigError: A non-loopback ``host`` without a token, or bad options.
    """
    import uvicorn

    check_bind(host, token)
    app = create_server_app(
        options, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s, token=token, workers=workers
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)
