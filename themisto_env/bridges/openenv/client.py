"""The OpenEnv client of a ``themisto serve`` server:
[`ThemistoEnvClient`][themisto_env.bridges.openenv.ThemistoEnvClient].

It is OpenEnv's ``EnvClient`` (async; ``.sync()`` for a blocking wrapper) over one WebSocket session, so
one client is one episode at a time with its own kernel on the server::

    from themisto_env.bridges.openenv.client import ThemistoEnvClient
    from themisto_env.bridges.openenv.models import ThemistoAction

    with ThemistoEnvClient("http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=0)                     # or trajectory=ID, sample=N, task=..., observation=...
        result = env.step(ThemistoAction.call("list_variables"))
        print(result.observation.tool_result)
        result = env.step(ThemistoAction.predict("df.head()"))
        print(result.reward, result.observation.info["scores"])

``token`` sends ``Authorization: Bearer TOKEN`` (a server started with ``--token``).
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from themisto_env.bridges.openenv.models import ThemistoAction, ThemistoObservation, ThemistoState

__all__ = ["ThemistoEnvClient"]


class ThemistoEnvClient(EnvClient[ThemistoAction, ThemistoObservation, ThemistoState]):
    """A session with a themisto OpenEnv server (see the module docstring).

    Args:
        base_url: The server (``http://HOST:PORT`` or ``ws://HOST:PORT``).
        token: The server's token, if it was started with one.
        **kwargs: OpenEnv's ``EnvClient`` options (``connect_timeout_s``, ``message_timeout_s``, ...).
    """

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("message_timeout_s", 600.0)  # a first reset may build the bundled data
        super().__init__(base_url, **kwargs)
        self._token = token

    async def connect(self) -> ThemistoEnvClient:
        """Open the WebSocket (with the token's header when one is given).

        Raises:
            ConnectionError: The server cannot be reached, or refused the token.
        """
        if self._ws is not None:
            return self
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            self._ws = await ws_connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_message_size,
                additional_headers=headers,
                proxy=None,  # a loopback or cluster address, never through a proxy
            )
        except Exception as exc:
            raise ConnectionError(f"cannot open a session at {self._ws_url}: {exc}") from exc
        return self

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a message and read the answer; an error answer raises ``RuntimeError`` (as OpenEnv's client
        does) naming the code and, for a malformed action, what is wrong with it."""
        try:
            await self._send(message)
        except ConnectionClosed as exc:  # the server said why before closing (capacity, a closed session)?
            try:
                response = await self._receive()
            except ConnectionClosed:
                raise ConnectionError(f"the server closed the session: {exc}") from None
        else:
            response = await self._receive()
        if response.get("type") == "error":
            data = response.get("data") or {}
            problems = [
                f"{'.'.join(str(part) for part in error.get('loc') or ()) or 'action'}: {error.get('msg')}"
                for error in data.get("errors") or ()
                if isinstance(error, dict)
            ]
            detail = f" ({'; '.join(problems)})" if problems else ""
            raise RuntimeError(f"server error {data.get('code', 'UNKNOWN')}: {data.get('message', '?')}{detail}")
        return response

    def _step_payload(self, action: ThemistoAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ThemistoObservation]:
        observation = ThemistoObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> ThemistoState:
        return ThemistoState(**payload)
