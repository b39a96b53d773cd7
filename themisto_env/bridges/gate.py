"""The token gate in front of the served apps (``themisto serve``, ``themisto mcp --http``): `check_bind`
refuses to listen beyond this machine without a token, `Gate` asks every request for it."""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
from typing import Any

from starlette.websockets import WebSocketDisconnect
from uvicorn.protocols.utils import ClientDisconnected

from themisto_env.errors import ConfigError

__all__ = ["OPEN_PATHS", "Gate", "check_bind"]

OPEN_PATHS = frozenset({"/health"})
"""Paths a token does not guard (liveness probes)."""


def check_bind(host: str, token: str | None, flag: str = "--host") -> None:
    """Refuse to listen beyond this machine without a token (``flag`` names the option in the error).

    Raises:
        ConfigError: ``host`` is not a loopback address (or ``localhost``) and ``token`` is empty.
    """
    if token or host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"{flag} {host} listens beyond this machine: give --token TOKEN (or THEMISTO_SERVE_TOKEN) so that "
            "only clients holding it get in"
        )


class Gate:
    """ASGI middleware in front of the app.

    * With a token, requests (HTTP and WebSocket) must carry ``Authorization: Bearer TOKEN``, except
      `OPEN_PATHS`; the comparison takes constant time.
    * A WebSocket whose client has already gone when OpenEnv closes it is not an error (OpenEnv's handler
      closes every socket at the end of a session, and uvicorn would log a traceback for each).
    """

    def __init__(self, app: Any, token: str | None = None) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if self._expected is not None and kind in ("http", "websocket") and scope.get("path") not in OPEN_PATHS:
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await _refuse(kind, receive, send)
                return
        if kind != "websocket":
            await self.app(scope, receive, send)
            return
        with contextlib.suppress(WebSocketDisconnect, ClientDisconnected):  # the client left first
            await self.app(scope, receive, send)


async def _refuse(kind: str, receive: Any, send: Any) -> None:
    if kind == "websocket":
        await receive()  # websocket.connect; closing before accept answers HTTP 403
        await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong token"})
        return
    body = json.dumps({"detail": "missing or wrong token: send the header 'Authorization: Bearer TOKEN'"}).encode()
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
