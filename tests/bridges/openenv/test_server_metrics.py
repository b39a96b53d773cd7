"""``GET /metrics`` of ``themisto serve``, for real: a server in its own process (bundled data, local kernels),
scraped as Prometheus would and read with the Prometheus client's own parser.

The figures move with what the sessions do: sessions open and close, tool calls (and only the calls that
ran), a killed kernel (a fault of its kind), execution-score runs; the route is guarded by the token as
every other route; scrapes under load never fail; two servers in one process count apart.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

pytest.importorskip("openenv.core", reason="openenv-core is not installed: pip install 'themisto-env[serve]'")
pytest.importorskip("prometheus_client", reason="prometheus-client is not installed: pip install 'themisto-env[serve]'")

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.bridges.openenv.test_server import (  # the fixtures too, used here by name
    AUTH,
    TOKEN,
    Server,
    _start,
    _stop,
    _wait_until,
    bundled_data,  # noqa: F401
)
from themisto_env.bridges.openenv.client import ThemistoEnvClient
from themisto_env.bridges.openenv.models import ThemistoAction
from themisto_env.bridges.openenv.server_metrics import (
    FAULT_KINDS,
    ROUTES,
    ServerMetrics,
    fault_kind,
    route_of,
)
from themisto_env.errors import (
    InfrastructureError,
    KernelDiedError,
    KernelStartError,
    SnapshotCorruptError,
    TemplateGoneError,
)
from themisto_env.state.check import StateReport

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

FAMILIES = {
    "themisto_sessions_open": "gauge",
    "themisto_sessions_limit": "gauge",
    "themisto_kernels_alive": "gauge",
    "themisto_kernel_templates_alive": "gauge",
    "themisto_template_prebuild_failures": "counter",
    "themisto_state_serve_seconds": "histogram",
    "themisto_tool_call_seconds": "histogram",
    "themisto_faults": "counter",
    "themisto_execution_score_runs": "counter",
    "themisto_process_tree_memory_bytes": "gauge",
    "themisto_process_tree_processes": "gauge",
}


def _parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _scrape(server: Server) -> Samples:
    answer = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return _parse(answer.text)


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _tool_calls(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["tool"]: value
        for (name, labels), value in samples.items()
        if name == "themisto_tool_call_seconds_count"
    }


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """A server with a token, at most 3 sessions, the execution score on."""
    started = _start("--max-sessions", "3", "--execution-score", env={**os.environ, "THEMISTO_SERVE_TOKEN": TOKEN})
    try:
        yield started
    finally:
        _stop(started)


def _client(server: Server) -> ThemistoEnvClient:
    return ThemistoEnvClient(server.url, token=TOKEN, message_timeout_s=300)


def test_metrics_parse_and_sessions_open_move_as_sessions_open_and_close(server: Server) -> None:
    _wait_until(lambda: _value(_scrape(server), "themisto_sessions_open") == 0, 30, "earlier sessions closed")
    first = _scrape(server)
    families = {
        f.name: f.type for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics", headers=AUTH).text)
    }
    assert {name: families.get(name) for name in FAMILIES} == FAMILIES
    assert _value(first, "themisto_sessions_limit") == 3
    assert {_value(first, "themisto_faults_total", kind=kind) for kind in FAULT_KINDS} == {0.0}  # present at 0
    assert _value(first, "themisto_process_tree_memory_bytes", measure="pss") > 0
    assert _value(first, "themisto_process_tree_processes") >= 1
    a, b = _client(server).sync(), _client(server).sync()
    with a:
        a.reset(observation="tools", trajectory=0, sample=0)
        assert _value(_scrape(server), "themisto_sessions_open") == 1
        with b:
            b.reset(observation="static")
            assert _value(_scrape(server), "themisto_sessions_open") == 2
            a.step(ThemistoAction.call("list_variables"))  # a's kernel now runs
            live = _scrape(server)
            assert _value(live, "themisto_kernels_alive", placement="host") >= 1
            assert _value(live, "themisto_kernel_templates_alive", kind="kernel") >= 1  # local kernels are forked
            assert sum(_value(live, "themisto_state_serve_seconds_count", route=r) for r in ROUTES) >= 1
        _wait_until(lambda: _value(_scrape(server), "themisto_sessions_open") == 1, 30, "b's session closed")
    _wait_until(lambda: _value(_scrape(server), "themisto_sessions_open") == 0, 30, "a's session closed")


def test_the_tool_call_histogram_moves_by_the_calls_that_ran(server: Server) -> None:
    before = _tool_calls(_scrape(server))
    with _client(server).sync() as env:
        env.reset(observation="tools", trajectory=0, sample=0)
        for action in (
            ThemistoAction.call("list_variables"),
            ThemistoAction.call("memory_usage"),
            ThemistoAction.call("list_variables"),
            ThemistoAction.call("inspect_variable", name="no_such_variable"),  # ran: an answer, not an error
            ThemistoAction.call("no_such_tool"),  # answered "unknown tool": counted under a bounded label
            ThemistoAction.call("list_variables"),  # past the budget of 5: refused, nothing runs
            ThemistoAction.call("memory_usage"),  # refused too
        ):
            env.step(action)
    after = _tool_calls(_scrape(server))
    moved = {tool: after[tool] - before[tool] for tool in after if after[tool] != before[tool]}
    assert moved == {"list_variables": 2, "memory_usage": 1, "inspect_variable": 1, "other": 1}


def test_a_killed_kernel_moves_the_faults_counter_by_its_kind(server: Server) -> None:
    before = _scrape(server)
    with _client(server).sync() as env:
        env.reset(observation="tools", trajectory=0, sample=1)
        env.step(ThemistoAction.call("list_variables"))  # the session's kernel runs
        killed = server.kernels()
        assert killed
        for kernel in killed:  # the session's and any spare: all the server's (this test's own server)
            kernel.send_signal(signal.SIGKILL)
        psutil.wait_procs(killed, timeout=10)
        result = env.step(ThemistoAction.call("list_variables"))
        assert "KernelDiedError" in str(result.observation.info.get("infrastructure_error")), result.observation.info
        again = env.step(ThemistoAction.call("list_variables"))  # recovered: the next call runs
        assert again.observation.info.get("tool_result"), again.observation.info
    after = _scrape(server)
    assert (
        _value(after, "themisto_faults_total", kind="kernel_died")
        >= _value(before, "themisto_faults_total", kind="kernel_died") + 1
    )
    assert _value(after, "themisto_faults_total", kind="state_mismatch") == _value(
        before, "themisto_faults_total", kind="state_mismatch"
    )


def test_execution_score_runs_are_counted(server: Server) -> None:
    before = _scrape(server)
    with _client(server).sync() as env:
        env.reset(task="next-cell", observation="static", trajectory=0, sample=0)
        result = env.step(ThemistoAction.predict("x = 1"))
        assert result.observation.info.get("execution_score") is not None, result.observation.info
    after = _scrape(server)
    runs = {
        outcome: _value(after, "themisto_execution_score_runs_total", outcome=outcome)
        - _value(before, "themisto_execution_score_runs_total", outcome=outcome)
        for outcome in ("scored", "nothing_recorded", "fault")
    }
    assert runs == {"scored": 1, "nothing_recorded": 0, "fault": 0}


def test_metrics_are_refused_without_the_token_as_every_route_is(server: Server) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        metrics = httpx.get(f"{server.url}/metrics", headers=headers)
        schema = httpx.get(f"{server.url}/schema", headers=headers)
        assert metrics.status_code == schema.status_code == 401
        assert metrics.json() == schema.json() and metrics.headers["www-authenticate"] == "Bearer"
        assert "themisto_" not in metrics.text


@pytest.mark.slow
def test_scrapes_under_load_never_fail_and_count_every_call(server: Server) -> None:
    """Three sessions step as fast as they can (reset, two tools, a prediction) while /metrics is scraped
    in a loop: every scrape answers and parses, and the tool-call count moves by exactly the calls made."""
    _wait_until(lambda: _value(_scrape(server), "themisto_sessions_open") == 0, 30, "earlier sessions closed")
    before = sum(_tool_calls(_scrape(server)).values())
    stop = threading.Event()
    scrapes: list[float] = []
    failures: list[str] = []

    def scrape() -> None:
        with httpx.Client(headers=AUTH, timeout=60) as http:
            while not stop.is_set():
                try:
                    answer = http.get(f"{server.url}/metrics")
                    answer.raise_for_status()
                    scrapes.append(_value(_parse(answer.text), "themisto_sessions_open"))
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")

    calls = [0, 0, 0]

    def session(index: int, until: float) -> None:
        with _client(server).sync() as env:
            while time.monotonic() < until:
                env.reset(observation="tools", seed=index * 1000 + calls[index])
                for tool in ("list_variables", "memory_usage"):
                    env.step(ThemistoAction.call(tool))
                    calls[index] += 1
                env.step(ThemistoAction.predict("df.head()"))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    until = time.monotonic() + 8
    sessions = [threading.Thread(target=session, args=(i, until)) for i in range(3)]
    try:
        for thread in sessions:
            thread.start()
        for thread in sessions:
            thread.join(timeout=300)
    finally:
        stop.set()
        scraper.join(timeout=60)
    assert not failures, failures[:3]
    assert len(scrapes) >= 5 and max(scrapes) <= 3
    assert sum(_tool_calls(_scrape(server)).values()) - before == sum(calls) > 0


# -- without a server ---------------------------------------------------------------------------------------------


def test_two_servers_in_one_process_count_apart() -> None:
    first, second = ServerMetrics(max_sessions=2, sessions=lambda: 1), ServerMetrics(max_sessions=5, sessions=lambda: 0)
    first.tool_called("list_variables", 0.01)
    first.fault(KernelDiedError("gone"))
    one, two = _parse(first.exposition().decode()), _parse(second.exposition().decode())
    assert _tool_calls(one)["list_variables"] == 1 and _tool_calls(two)["list_variables"] == 0
    assert _value(one, "themisto_faults_total", kind="kernel_died") == 1
    assert _value(two, "themisto_faults_total", kind="kernel_died") == 0
    assert (_value(one, "themisto_sessions_limit"), _value(two, "themisto_sessions_limit")) == (2, 5)


def test_a_fault_is_counted_once_by_its_kind() -> None:
    metrics = ServerMetrics(max_sessions=1, sessions=lambda: 0)
    error = TemplateGoneError("the template is gone")
    metrics.fault(error)
    metrics.fault(error)  # met again on the way up (a failed serve, then its recovery): one fault
    metrics.fault("SnapshotCorruptError: snapshot abc: its content does not hash to its name")
    metrics.tool_called("a tool a client made up", 0.5)  # a bounded label, whatever is sent
    samples = _parse(metrics.exposition().decode())
    faults = {kind: _value(samples, "themisto_faults_total", kind=kind) for kind in FAULT_KINDS}
    assert faults == {kind: float(kind in ("template_gone", "snapshot")) for kind in FAULT_KINDS}
    assert _tool_calls(samples)["other"] == 1


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (KernelDiedError("x"), "kernel_died"),
        (TemplateGoneError("x"), "template_gone"),  # a KernelStartError? no: its own kind
        (KernelStartError("x"), "kernel_start"),
        (SnapshotCorruptError("x"), "snapshot"),
        (InfrastructureError("x"), "infrastructure"),
        ("KernelDiedError: the kernel died (recovered: kernel restarted and state restored)", "kernel_died"),
        ("ReplayDivergedError: cell 3 ended otherwise", "replay_diverged"),
        ("RuntimeError: not one of ours", "infrastructure"),
        ("no type at all", "infrastructure"),
    ],
)
def test_fault_kinds(fault: BaseException | str, kind: str) -> None:
    assert fault_kind(fault) == kind


@pytest.mark.parametrize(
    ("route", "served_by", "label"),
    [
        ("in place", "fork", "forward"),
        ("forward (3 cells)", "restore", "forward"),
        ("snapshot after step 4 + 2 cells", "fork", "fork"),
        ("snapshot after step 4", "restore", "restore"),
        ("snapshot after step 4", "restore (not fork-safe: an open file)", "restore"),
        ("fresh + 3 cells", "fork", "fresh"),
        ("failed", "", "failed"),
    ],
)
def test_routes(route: str, served_by: str, label: str) -> None:
    assert route_of(StateReport("t", 5, route=route, served_by=served_by)) == label
