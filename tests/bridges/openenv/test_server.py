"""``themisto serve`` for real: the server in its own process on a free loopback port, spoken to by
[`ThemistoEnvClient`][themisto_env.bridges.openenv.ThemistoEnvClient], raw WebSockets and plain HTTP.

The rewards over the network equal the in-process env's on the same actions; malformed requests are 4xx
or error messages and the server stays up; a token guards everything but /health; sessions beyond
``--max-sessions`` are refused; a client that vanishes, or a session left idle, frees its kernel; and
nothing the server started outlives it (processes by pid).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

pytest.importorskip("openenv.core", reason="openenv-core is not installed: pip install 'themisto-env[serve]'")

import httpx
from websockets.asyncio.client import connect

from tests.conftest import kernels_under
from themisto_env.bridges.openenv.client import ThemistoEnvClient
from themisto_env.bridges.openenv.models import ThemistoAction
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.replay.dataset import Dataset

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]
    log: Path

    @property
    def ws(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def kernels(self) -> list[psutil.Process]:
        """The live kernels the server started."""
        return kernels_under(self.process.pid)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(*args: str, env: dict[str, str] | None = None) -> Server:
    port = _free_port()
    command = [sys.executable, "-m", "themisto_env.cli", "serve", "--port", str(port), "--log-level", "warning"]
    log = tempfile.NamedTemporaryFile("w+", prefix="themisto-serve-", suffix=".log", delete=False)  # noqa: SIM115
    # a file, not a pipe nobody reads: the server and its kernels may write more than a pipe holds
    process = subprocess.Popen([*command, *args], stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600  # a first use of changed data builds it first
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited {process.returncode}: {Path(log.name).read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return Server(url, process, Path(log.name))
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the server did not answer /health within 600 s: {Path(log.name).read_text()[-3000:]}")


def _stop(server: Server) -> None:
    """Stop the server (SIGTERM, as a supervisor would) and check that nothing it started is left."""
    parent = psutil.Process(server.process.pid)
    started = parent.children(recursive=True)
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
        raise AssertionError("the server did not stop within 30 s of SIGTERM") from None
    _gone, alive = psutil.wait_procs(started, timeout=15)
    server.log.unlink(missing_ok=True)
    assert not alive, f"left running after the server stopped: {[p.pid for p in alive]}"


def _wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module", autouse=True)
def bundled_data() -> None:
    """The bundled data built (on first use, minutes) before any server starts, so a server's start is its own."""
    Dataset.open()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """A server with a token, at most 2 sessions."""
    started = _start("--max-sessions", "2", env={**os.environ, "THEMISTO_SERVE_TOKEN": TOKEN})
    try:
        yield started
    finally:
        _stop(started)


def _client(server: Server) -> ThemistoEnvClient:
    return ThemistoEnvClient(server.url, token=TOKEN, message_timeout_s=300)


# the same actions, in process and over the network: a tool call, an unknown tool, predictions
ACTIONS = [
    ThemistoAction.call("list_variables"),
    ThemistoAction.call("no_such_tool"),
    ThemistoAction.predict("df = pd.read_csv('wine.csv')"),
    ThemistoAction.call("recent_executions", n=2),
    ThemistoAction.predict(""),
    ThemistoAction.predict("print(df.shape)"),
]


@pytest.mark.parametrize(
    ("task", "observation"),
    [
        pytest.param("next-cell", "tools", marks=pytest.mark.slow),
        ("output", "static"),
        pytest.param("next-cell", "full", marks=pytest.mark.slow),
    ],
)
def test_rewards_over_the_network_equal_the_in_process_env(server: Server, task: str, observation: str) -> None:
    local = ThemistoEnv(task=task, observation=observation)
    try:
        _obs, info = local.reset(options={"trajectory": 0, "sample": 0})
        expected = [local.step(action.env_action()) for action in ACTIONS]
    finally:
        local.close()
    with _client(server).sync() as env:
        first = env.reset(task=task, observation=observation, trajectory=0, sample=0)
        assert first.observation.info == json.loads(json.dumps(info))
        got = [env.step(action) for action in ACTIONS]
        state = env.state()
    for (obs, reward, terminated, _truncated, info), result in zip(expected, got, strict=True):
        assert result.reward == reward and result.observation.reward == reward
        assert result.done == terminated
        assert result.observation.tool_result == obs["tool_result"]
        assert result.observation.history == obs["history"] and result.observation.cell == obs["cell"]
        assert result.observation.tools_left == obs["tools_left"]
        assert result.observation.info == json.loads(json.dumps(info))  # ids, scores, flags
    assert sum(r.observation.info.get("scored_sample_id") is not None for r in got) == 3
    assert state.task == task and state.observation_mode == observation and state.step_count == len(ACTIONS)
    assert state.scored == 3 and state.total_reward == pytest.approx(sum(e[1] for e in expected))


def test_malformed_requests_are_4xx_and_the_server_stays_up(server: Server) -> None:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
        bad_json = http.post("/step", content=b'{"action":', headers={"content-type": "application/json"})
        assert bad_json.status_code == 422
        mixed = http.post("/step", json={"action": {"kind": "predict", "tool": "list_variables", "text": "x"}})
        assert mixed.status_code == 422 and "has no 'tool'" in mixed.text
        no_kind = http.post("/step", json={"action": {"text": "x"}})
        assert no_kind.status_code == 422
        # a well-formed step outside a session: one line saying where episodes live, not a 500
        stateless = http.post("/step", json={"action": {"kind": "predict", "text": "x"}})
        assert stateless.status_code == 400 and "WebSocket" in stateless.json()["detail"]
        bad_reset = http.post("/reset", json={"trajectroy": 0})
        assert bad_reset.status_code == 400 and "unknown reset key 'trajectroy'" in bad_reset.json()["detail"]
        assert http.get("/health").json() == {"status": "healthy"}

    async def session() -> list[dict[str, object]]:
        answers = []
        async with connect(server.ws, additional_headers=AUTH, proxy=None) as ws:
            for message in (
                "not json",
                json.dumps({"type": "launch"}),
                json.dumps({"type": "step", "data": {"kind": "predict", "text": "x"}}),  # before reset
                json.dumps({"type": "reset", "data": {"trajectory": "nope"}}),
                json.dumps({"type": "reset", "data": {"sample": 0}}),
                json.dumps({"type": "step", "data": {"kind": "tool"}}),
                json.dumps({"type": "step", "data": {"kind": "tool", "tool": "list_variables", "extra": 1}}),
                json.dumps({"type": "step", "data": {"kind": "predict", "text": "x = 1"}}),  # still usable
            ):
                await ws.send(message)
                answers.append(json.loads(await ws.recv()))
        return answers

    answers = asyncio.run(session())
    codes = [a["data"].get("code") if a["type"] == "error" else a["type"] for a in answers]  # type: ignore[union-attr]
    assert codes == [
        "INVALID_JSON",
        "UNKNOWN_TYPE",
        "EXECUTION_ERROR",
        "EXECUTION_ERROR",
        "observation",
        "VALIDATION_ERROR",
        "VALIDATION_ERROR",
        "observation",
    ]
    assert "reset first" in answers[2]["data"]["message"]  # type: ignore[index]
    assert "no trajectory 'nope'" in answers[3]["data"]["message"]  # type: ignore[index]
    assert answers[7]["data"]["observation"]["info"]["scored_sample_id"]  # type: ignore[index]

    with _client(server).sync() as env:  # the client says what is wrong with an action
        env.reset(observation="static")
        with pytest.raises(RuntimeError, match=r"VALIDATION_ERROR.*needs 'text'"):
            env.step(ThemistoAction.model_construct(kind="predict", args={}, metadata={}))


def test_a_token_guards_everything_but_health(server: Server) -> None:
    assert httpx.get(f"{server.url}/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = httpx.get(f"{server.url}/schema", headers=headers)
        assert refused.status_code == 401 and "Authorization: Bearer" in refused.json()["detail"]
    assert httpx.get(f"{server.url}/schema", headers=AUTH).json()["action"]["title"] == "ThemistoAction"
    with pytest.raises(ConnectionError, match="403"):
        asyncio.run(ThemistoEnvClient(server.url, token="wrong").connect())
    with pytest.raises(ConnectionError, match="403"):
        asyncio.run(ThemistoEnvClient(server.url).connect())


def test_sessions_beyond_max_sessions_are_refused(server: Server) -> None:
    first, second = _client(server).sync(), _client(server).sync()
    with first, second:
        first.reset(observation="static")
        second.reset(observation="static")
        with _client(server).sync() as third, pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            third.reset()
    with _client(server).sync() as again:  # the slots are free once they left
        assert again.reset(observation="static").observation.info["sample_id"]


def test_the_server_says_at_its_start_how_many_sessions_fit_and_lifts_its_descriptor_limit(server: Server) -> None:
    said = server.log.read_text()
    assert re.search(r"sessions that fit on this machine: about \d+ \(\d+ in memory", said), said[-2000:]
    soft, hard = Path(f"/proc/{server.process.pid}/limits").read_text().split("Max open files")[1].split()[:2]
    assert soft == hard


def test_a_client_that_vanishes_frees_its_kernel(server: Server) -> None:
    _wait_until(lambda: server.kernels() == [], 30, "the kernels of earlier sessions closed")

    async def vanish() -> None:
        ws = await connect(server.ws, additional_headers=AUTH, proxy=None)
        await ws.send(json.dumps({"type": "reset", "data": {"observation": "tools", "trajectory": 0}}))
        await ws.recv()
        await ws.send(json.dumps({"type": "step", "data": {"kind": "tool", "tool": "list_variables"}}))
        answer = json.loads(await ws.recv())
        assert answer["type"] == "observation", answer
        assert server.kernels(), "a tool call runs in a live kernel"
        ws.transport.abort()  # no close message, no closing handshake: the connection just drops

    asyncio.run(vanish())
    _wait_until(lambda: server.kernels() == [], 30, "the vanished session's kernels closed")


@pytest.mark.slow
def test_an_idle_session_is_closed_with_its_kernel_and_a_stopped_server_closes_the_rest() -> None:
    idle = _start("--idle-timeout", "1")  # OpenEnv's reaper looks every 5 s at most
    left_open = ThemistoEnvClient(idle.url).sync()
    try:
        with ThemistoEnvClient(idle.url).sync() as env:
            env.reset(observation="tools", trajectory=0)
            env.step(ThemistoAction.call("list_variables"))
            assert idle.kernels()
            _wait_until(lambda: idle.kernels() == [], 30, "the idle session's kernels closed")
            with pytest.raises(RuntimeError, match="session is closed"):
                env.step(ThemistoAction.call("list_variables"))
        left_open.connect()
        left_open.reset(observation="tools", trajectory=1)
        left_open.step(ThemistoAction.call("memory_usage"))
        assert idle.kernels()
    finally:
        _stop(idle)  # SIGTERM with a session open and its kernel live: nothing may be left
        with contextlib.suppress(Exception):
            left_open.close()


def test_a_session_in_a_call_longer_than_the_idle_timeout_is_not_closed_under_it() -> None:
    """OpenEnv's reaper looks every 5 s and times idleness from the last call's end: a tried cell that runs
    7 s in a session idle-timed at 1 s spans at least one look. The call answers, and the session goes on."""
    idle = _start("--idle-timeout", "1")
    try:
        with ThemistoEnvClient(idle.url).sync() as env:
            env.reset(observation="tools", task="next-cell", trajectory=0)
            started = time.monotonic()
            tried = env.step(ThemistoAction.call("try_cell", code="import time; time.sleep(7); print('woke')"))
            assert time.monotonic() - started >= 7
            assert "woke" in (tried.observation.tool_result or ""), tried.observation
            assert env.step(ThemistoAction.call("list_variables")).observation.tool_result
        _wait_until(lambda: idle.kernels() == [], 30, "the session's kernels closed once it left")
    finally:
        _stop(idle)


@pytest.mark.slow
def test_open_sessions_hold_no_thread_each() -> None:
    """Sessions opened all at once, each with a live kernel and its state served, then left idle: the
    server's threads grow by at most the shared pool's, never by one per session (OpenEnv's own executor
    per WebSocket kept a thread for each), and every session still answers."""
    workers, more = 3, 20
    server = _start("--max-sessions", str(more + 1), "--workers", str(workers), "--idle-timeout", "0")

    async def opened(client: ThemistoEnvClient, trajectory: int) -> None:
        await client.connect()
        await client.reset(observation="tools", trajectory=trajectory % 4)
        result = await client.step(ThemistoAction.call("list_variables"))
        assert result.observation.tool_result, result

    async def run() -> tuple[int, int, int]:
        first = ThemistoEnvClient(server.url, message_timeout_s=300)
        clients = [ThemistoEnvClient(server.url, message_timeout_s=300) for _ in range(more)]
        try:
            await opened(first, 0)  # the zmq context, the kernel template, the state server, the pool's first
            before = psutil.Process(server.process.pid).num_threads()
            await asyncio.gather(*(opened(client, i) for i, client in enumerate(clients)))
            await asyncio.sleep(1.0)
            after = psutil.Process(server.process.pid).num_threads()
            for client in clients:  # each still answers, one at a time
                assert (await client.step(ThemistoAction.call("list_variables"))).observation.tool_result
            return before, after, len(server.kernels())
        finally:
            await asyncio.gather(first.close(), *(client.close() for client in clients), return_exceptions=True)

    try:
        before, after, kernels = asyncio.run(run())
    finally:
        _stop(server)
    assert kernels >= more + 1, f"{kernels} live kernels for {more + 1} open sessions"
    assert after - before <= workers, f"{more} more sessions open, idle: {before} -> {after} threads"


def test_listening_beyond_loopback_needs_a_token() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "themisto_env.cli", "serve", "--host", "0.0.0.0", "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={key: value for key, value in os.environ.items() if key != "THEMISTO_SERVE_TOKEN"},
    )
    assert result.returncode == 1
    assert "--host 0.0.0.0 listens beyond this machine: give --token" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_a_pool_of_no_threads_is_refused_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "themisto_env.cli", "serve", "--workers", "0", "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "--workers is at least 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr and "themisto serve: http" not in result.stdout


def test_the_in_process_action_is_the_gym_envs() -> None:
    assert ThemistoAction.call("inspect_variable", name="df").env_action() == ToolCall(
        tool="inspect_variable", args={"name": "df"}
    )
    assert ThemistoAction.predict("x").env_action() == Prediction(text="x")


@pytest.mark.slow
def test_the_trl_example_rollout_earns_the_in_process_reward(server: Server) -> None:
    """examples/train_grpo_openenv.py's rollout (TRL's environment_factory instance) over the server: the
    reward of a sample is what the in-process env pays for the same tool call and prediction."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    try:
        from train_grpo_openenv import RemoteRollout
    finally:
        sys.path.pop(0)
    sample_id = "wine-classification-f289726f/next-cell/3"
    local = ThemistoEnv(task="next-cell", observation="tools")
    try:
        local.reset(options=_position(local, sample_id))
        local.step(ToolCall(tool="list_variables"))
        *_, info = local.step(Prediction(text="print(df.head())"))
    finally:
        local.close()
    with RemoteRollout(server.url, token=TOKEN) as rollout:
        assert "submit" in rollout.reset(sample_id=sample_id, prompt=[])
        assert rollout.list_variables()
        rollout.submit("```python\nprint(df.head())\n```")  # read as the agents read a reply
        assert rollout.get_reward() == info["reward"]
        assert rollout.last_info["scored_sample_id"] == sample_id


def _position(env: ThemistoEnv, sample_id: str) -> dict[str, object]:
    trajectory = sample_id.rsplit("/", 2)[0]
    index = [s.id for s in env.episode.episode_samples[trajectory]].index(sample_id)
    return {"trajectory": trajectory, "sample": index}
