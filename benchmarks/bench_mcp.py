"""A tool call over MCP (stdio and streamable HTTP) against the same call in process, and sessions per node
over ``/mcp`` (issue 45).

Run from the repository root::

    python benchmarks/bench_mcp.py [--calls 200] [--rounds 10] [--sessions 100] [--opening 16]

1. The same call, timed three ways in one run, interleaved in ``--rounds`` rounds, at the same sample (the
   bundled data, local backend, tools mode, a tool budget past the calls): in process
   (``Episode.step(ToolCall(...))``), over stdio (the SDK's client and a ``themisto mcp`` process), and over
   HTTP (the SDK's client at ``/mcp`` of a ``themisto serve``, with a token). Two calls: ``kernel``
   (``inspect_variable`` of an unknown name: the kernel's helper answers every time) and ``list_variables``
   (answered from the state's kept answers after the first). Printed: p50 / p90 of each and the ratios to
   in process.
2. Sessions per node: ``--sessions`` MCP sessions at ``/mcp`` of one ``themisto serve``, opened
   ``--opening`` at a time, each started at its own sample and served (one ``kernel`` call); then, all held
   open, one ``kernel`` call per session one session at a time (the latency of a call while all are open:
   p50 / p90), and one per session all at once (the machine's throughput). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio
import httpx2
from bench_serve import start_server
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from themisto_env.env.episode import Episode
from themisto_env.env.tools import ToolCall

TOKEN = "bench-mcp-token"
CALLS = {"kernel": ("inspect_variable", {"name": "_no_such_variable"}), "list_variables": ("list_variables", {})}


def quantiles(seconds: list[float]) -> tuple[float, float]:
    """p50 and p90 in milliseconds."""
    ordered = sorted(seconds)
    return statistics.median(ordered) * 1000, ordered[int(0.9 * (len(ordered) - 1))] * 1000


async def side_by_side(
    episode: Episode, stdio: Client, http: Client, sample_id: str, calls: int, rounds: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """The same calls on the three paths, interleaved in ``rounds`` (a changing load falls on all three)."""
    tid, index = episode.dataset.episode_position(sample_id, episode.config.sample_rule)
    episode.reset({"trajectory": tid, "sample": index})
    for client in (stdio, http):
        started = await client.call_tool("start_sample", {"sample_id": sample_id})
        assert not started.is_error, started.content

    async def local(name: str, args: dict[str, Any]) -> None:
        episode.step(ToolCall(tool=name, args=args))

    paths: dict[str, Callable[[str, dict[str, Any]], Awaitable[Any]]] = {
        "in process": local,
        "MCP stdio": stdio.call_tool,
        "MCP HTTP (/mcp)": http.call_tool,
    }
    seconds: dict[str, dict[str, list[float]]] = {path: {label: [] for label in CALLS} for path in paths}
    for name, args in CALLS.values():
        for call in paths.values():
            await call(name, args)  # served, warmed
    for _ in range(rounds):
        for label, (name, args) in CALLS.items():
            for path, call in paths.items():
                for _ in range(max(1, calls // rounds)):
                    begun = time.perf_counter()
                    await call(name, args)
                    seconds[path][label].append(time.perf_counter() - begun)
    return {path: {label: quantiles(got) for label, got in timing.items()} for path, timing in seconds.items()}


def http_client(url: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), read_timeout_seconds=300)


async def sessions_per_node(url: str, samples: list[str], opening: int) -> dict[str, Any]:
    """N sessions held open; one call each one at a time, then all at once."""
    name, args = CALLS["kernel"]
    clients: list[Client] = []
    limiter = anyio.Semaphore(opening)
    opened: list[float] = []

    async def open_one(sample_id: str, ready: anyio.Event, hold: anyio.Event, failures: list[str]) -> None:
        async with limiter:
            begun = time.perf_counter()
            client = http_client(url)
            await client.__aenter__()
            started = await client.call_tool("start_sample", {"sample_id": sample_id})
            first = await client.call_tool(name, args)
            if started.is_error or "reward" not in (first.structured_content or {}):
                failures.append(sample_id)
            opened.append(time.perf_counter() - begun)
            clients.append(client)
        if len(clients) == len(samples):
            ready.set()
        await hold.wait()
        await client.__aexit__(None, None, None)

    async def timed(call: Callable[[], Awaitable[Any]]) -> float:
        begun = time.perf_counter()
        await call()
        return time.perf_counter() - begun

    ready, hold, failures = anyio.Event(), anyio.Event(), []
    result: dict[str, Any] = {}
    async with anyio.create_task_group() as group:
        begun = time.perf_counter()
        for sample_id in samples:
            group.start_soon(open_one, sample_id, ready, hold, failures)
        await ready.wait()
        result["open all s"] = time.perf_counter() - begun
        result["open p50 ms"] = statistics.median(opened) * 1000
        one_at_a_time = [await timed(lambda c=client: c.call_tool(name, args)) for client in clients]
        result["one at a time"] = quantiles(one_at_a_time)
        at_once: list[float] = []

        async def one(client: Client) -> None:
            at_once.append(await timed(lambda: client.call_tool(name, args)))

        async with anyio.create_task_group() as burst:
            for client in clients:
                burst.start_soon(one, client)
        result["all at once"] = quantiles(at_once)
        result["failures"] = len(failures)
        hold.set()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--opening", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10, help="Interleaved rounds of the three paths.")
    options = parser.parse_args()
    budget = 3 * options.calls + 10
    with Episode.open() as episode:
        all_samples = [sample.id for sample in episode.samples]
    sample_id = all_samples[0]
    print(f"load {os.getloadavg()[0]:.1f}; sample {sample_id}; {options.calls} calls each")

    stdio = StdioServerParameters(
        command=sys.executable, args=["-m", "themisto_env.cli", "mcp", "--tool-budget", str(budget)]
    )
    os.environ["THEMISTO_SERVE_TOKEN"] = TOKEN
    server, url = start_server(
        ["--tool-budget", str(budget), "--max-sessions", str(options.sessions + 4), "--idle-timeout", "0"]
    )
    try:

        async def measure() -> dict[str, dict[str, tuple[float, float]]]:
            with Episode.open(tool_budget=budget) as episode:
                async with (
                    Client(stdio_client(stdio), read_timeout_seconds=300) as on_stdio,
                    http_client(url) as on_http,
                ):
                    return await side_by_side(episode, on_stdio, on_http, sample_id, options.calls, options.rounds)

        rows = anyio.run(measure)
        base = rows["in process"]
        print("| path | kernel p50 / p90 ms | ratio p50 / p90 | list_variables p50 / p90 ms | ratio p50 / p90 |")
        print("| --- | --- | --- | --- | --- |")
        for path, timing in rows.items():
            cells = []
            for label in CALLS:
                p50, p90 = timing[label]
                cells += [f"{p50:.2f} / {p90:.2f}", f"{p50 / base[label][0]:.2f}x / {p90 / base[label][1]:.2f}x"]
            print(f"| {path} | {' | '.join(cells)} |")
        samples = [all_samples[i % len(all_samples)] for i in range(options.sessions)]
        result = anyio.run(sessions_per_node, url, samples, options.opening)
        one, burst = result["one at a time"], result["all at once"]
        print(
            f"\n{options.sessions} sessions at /mcp: opened in {result['open all s']:.1f} s ({options.opening} at a "
            f"time, a session's p50 {result['open p50 ms']:.0f} ms), {result['failures']} failures; all held open, "
            f"a call one at a time p50 / p90 {one[0]:.1f} / {one[1]:.1f} ms, all at once {burst[0]:.0f} / "
            f"{burst[1]:.0f} ms"
        )
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
