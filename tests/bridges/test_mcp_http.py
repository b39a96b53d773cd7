"""``/mcp`` on ``themisto serve`` for real (the server in its own process), spoken to by the ``mcp`` SDK's own
streamable-HTTP client: the in-process env's rewards, 16 sessions at once each in its own episode, a bad
token refused, and a closed or dropped session's kernels freed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil
import pytest

pytest.importorskip("mcp", reason="the mcp SDK is not installed: pip install 'themisto-env[mcp]'")
pytest.importorskip("openenv.core", reason="openenv-core is not installed: pip install 'themisto-env[serve]'")

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.bridges.mcp_support import ACTIONS, in_process_rewards, mcp_rewards
from tests.conftest import kernels_under
from themisto_env.env.episode import Episode
from themisto_env.replay.dataset import Dataset

TOKEN = "mcp-token-for-tests"
SAMPLE = "wine-classification-f289726f/next-cell/1"


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    log: Path

    def kernels(self) -> list[psutil.Process]:
        return kernels_under(self.process.pid)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(*args: str) -> Served:
    port = _free_port()
    command = [sys.executable, "-m", "themisto_env.cli", "serve", "--port", str(port), "--log-level", "warning"]
    log = tempfile.NamedTemporaryFile("w+", prefix="themisto-mcp-", suffix=".log", delete=False)  # noqa: SIM115
    env = {**os.environ, "THEMISTO_SERVE_TOKEN": TOKEN}
    process = subprocess.Popen([*command, *args], stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited {process.returncode}: {Path(log.name).read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return Served(url, process, Path(log.name))
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the server did not answer /health within 600 s")


def _stop(served: Served) -> None:
    started = psutil.Process(served.process.pid).children(recursive=True)
    served.process.terminate()
    served.process.wait(timeout=60)
    _gone, alive = psutil.wait_procs(started, timeout=15)
    served.log.unlink(missing_ok=True)
    assert not alive, f"left running after the server stopped: {[p.pid for p in alive]}"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """``themisto serve`` with a token; an MCP session idle for 4 s is closed."""
    Dataset.open()  # built before the server starts
    started = _start("--idle-timeout", "4")
    try:
        yield started
    finally:
        _stop(started)


@asynccontextmanager
async def http_session(served: Served, token: str = TOKEN, *, close: bool = True) -> AsyncIterator[Client]:
    """An MCP client session at ``/mcp`` (``close=False``: the client vanishes without ending its session)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300)
    transport = streamable_http_client(f"{served.url}/mcp", http_client=http, terminate_on_close=close)
    async with http, Client(transport, read_timeout_seconds=300) as client:
        yield client


def _wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


def test_an_episode_over_mcp_on_serve_earns_the_in_process_rewards(served: Served) -> None:
    expected = in_process_rewards({}, SAMPLE, ACTIONS)

    async def over_mcp() -> list:
        async with http_session(served) as client:
            return await mcp_rewards(client, SAMPLE, ACTIONS)

    got = anyio.run(over_mcp)
    assert got == expected


def test_sixteen_sessions_at_once_each_have_their_own_episode(served: Served) -> None:
    with Episode.open() as episode:
        samples = [sample.id for sample in episode.samples][:16]
    answers: dict[str, list] = {}

    async def one(sample_id: str) -> None:
        async with http_session(served) as client:
            answers[sample_id] = await mcp_rewards(client, sample_id, [("recent_executions", {"n": 3})])
            again = await client.call_tool("list_variables", {})
            assert again.structured_content["tool"] == "list_variables"
            answers[sample_id].append((await client.read_resource("themisto://sample/prompt")).contents[0].text)

    async def all_at_once() -> None:
        async with anyio.create_task_group() as group:
            for sample_id in samples:
                group.start_soon(one, sample_id)

    anyio.run(all_at_once)
    for sample_id in samples:  # each session answered from its own sample's state
        expected = in_process_rewards({}, sample_id, [("recent_executions", {"n": 3})])
        assert answers[sample_id][:1] == expected
    assert len({answers[sample_id][-1] for sample_id in samples}) > 1  # the prompts are the samples' own


def test_a_bad_token_is_refused(served: Served) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    accept = {"Accept": "application/json, text/event-stream"}
    for token in ("", "Bearer wrong", f"Bearer {TOKEN}x"):
        answer = httpx.post(f"{served.url}/mcp", json=initialize, headers={**accept, "Authorization": token})
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
    right = httpx.post(f"{served.url}/mcp", json=initialize, headers={**accept, "Authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 200 and right.headers.get("mcp-session-id")


def test_a_closed_session_frees_its_kernels(served: Served) -> None:
    before = {kernel.pid for kernel in served.kernels()}

    async def session() -> None:
        async with http_session(served) as client:
            await client.call_tool("start_sample", {"sample_id": SAMPLE})
            assert not (await client.call_tool("list_variables", {})).is_error
            assert {kernel.pid for kernel in served.kernels()} - before

    anyio.run(session)  # the client's DELETE ends the session
    _wait_until(lambda: not {k.pid for k in served.kernels()} - before, 30, "the closed session's kernel gone")


def test_a_dropped_session_frees_its_kernels_after_the_idle_timeout(served: Served) -> None:
    before = {kernel.pid for kernel in served.kernels()}

    async def vanish() -> None:
        async with http_session(served, close=False) as client:
            await client.call_tool("start_sample", {"sample_id": SAMPLE})
            assert not (await client.call_tool("list_variables", {})).is_error

    anyio.run(vanish)  # no DELETE: the server only sees no more calls
    assert {kernel.pid for kernel in served.kernels()} - before
    _wait_until(lambda: not {k.pid for k in served.kernels()} - before, 60, "the dropped session's kernel gone")
