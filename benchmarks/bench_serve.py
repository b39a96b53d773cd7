"""The OpenEnv server under load: concurrent sessions' step latency against the in-process env, errors, and
what is left after every session closes. Loopback only, bounded in time.

Run from the repository root::

    python benchmarks/bench_serve.py [--sessions 32] [--seconds 120] [--observation tools]

A ``themisto serve`` is started on a free 127.0.0.1 port (local backend, the bundled data,
``--max-sessions`` = sessions). Each session (one async ``ThemistoEnvClient``, all in this process)
loops for ``--seconds``: ``reset`` at a random sample, two tool calls (``list_variables``,
``memory_usage``), a prediction; every round trip is timed. Beside it the same loop runs in process on one
``ThemistoEnv`` (one session's worth, for ``--seconds / 4``). Printed and written as JSON: step latency
p50 / p99 by kind (reset, tool, predict) over the network and in process, steps per second, errors (goal
0), and the server's resources before the first session and after the last one closed: live kernels,
child processes, RSS (goal: back to the start, give or take the allocator).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

from themisto_env.bridges.openenv.client import ThemistoEnvClient
from themisto_env.bridges.openenv.models import ThemistoAction
from themisto_env.env.core import ThemistoEnv

TOOLS = (ThemistoAction.call("list_variables"), ThemistoAction.call("memory_usage"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    options: Sequence[str], *, stdout: int = subprocess.DEVNULL, timeout_s: float = 120.0
) -> tuple[subprocess.Popen[str], str]:
    """`themisto serve OPTIONS` on a free 127.0.0.1 port, once its /health answers: the process and its URL
    (stderr is a pipe: what it said is in the SystemExit of a server that did not start)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "themisto_env.cli", "serve", "--port", str(port), "--log-level", "warning"),
            *options,
        ],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                _, message = server.communicate()
                raise SystemExit(f"the server did not start: {message}") from None
            time.sleep(0.2)


def _resources(pid: int) -> dict[str, Any]:
    process = psutil.Process(pid)
    children = [c for c in process.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]
    kernels = [c for c in children if "ipykernel" in " ".join(c.cmdline())]
    return {"kernels": len(kernels), "children": len(children), "rss_mb": round(process.memory_info().rss / 2**20)}


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"n": len(values), "p50_ms": round(statistics.median(ordered) * 1000, 1), "p99_ms": round(p99 * 1000, 1)}


async def _session(url: str, until: float, seed: int, times: dict[str, list[float]], errors: list[str]) -> None:
    rng = random.Random(seed)
    client = ThemistoEnvClient(url, message_timeout_s=300)
    try:
        await client.connect()
        while time.monotonic() < until:
            try:
                start = time.perf_counter()
                await client.reset(seed=rng.randrange(2**31))
                times["reset"].append(time.perf_counter() - start)
                for action in TOOLS:
                    start = time.perf_counter()
                    await client.step(action)
                    times["tool"].append(time.perf_counter() - start)
                start = time.perf_counter()
                await client.step(ThemistoAction.predict("df.head()"))
                times["predict"].append(time.perf_counter() - start)
            except Exception as exc:  # counted and reported, the session goes on
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}"[:300])
    finally:
        await client.close()


def _in_process(observation: str, seconds: float) -> dict[str, list[float]]:
    times: dict[str, list[float]] = defaultdict(list)
    rng = random.Random(0)
    env = ThemistoEnv(observation=observation)
    try:
        env.reset(seed=0)  # the kernel started, untimed (a warm session)
        env.step(TOOLS[0].env_action())
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            start = time.perf_counter()
            env.reset(seed=rng.randrange(2**31))
            times["reset"].append(time.perf_counter() - start)
            for action in TOOLS:
                start = time.perf_counter()
                env.step(action.env_action())
                times["tool"].append(time.perf_counter() - start)
            start = time.perf_counter()
            env.step(ThemistoAction.predict("df.head()").env_action())
            times["predict"].append(time.perf_counter() - start)
    finally:
        env.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--observation", default="tools", choices=["static", "full", "tools"])
    parser.add_argument("--out", default=None, help="also write the result here (JSON)")
    args = parser.parse_args()

    server, url = start_server(["--max-sessions", str(args.sessions), "--observation", args.observation])
    try:
        before = _resources(server.pid)
        times: dict[str, list[float]] = defaultdict(list)
        errors: list[str] = []

        async def load() -> float:
            started = time.monotonic()
            until = started + args.seconds
            await asyncio.gather(*(_session(url, until, i, times, errors) for i in range(args.sessions)))
            return time.monotonic() - started

        wall = asyncio.run(load())
        peak = _resources(server.pid)  # sessions closing: kernels may still be on their way out
        settle = time.monotonic() + 30
        after = _resources(server.pid)
        while after["kernels"] > before["kernels"] and time.monotonic() < settle:
            time.sleep(0.5)
            after = _resources(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=60)
    local = _in_process(args.observation, max(10.0, args.seconds / 4))
    steps = sum(len(v) for v in times.values())
    result = {
        "sessions": args.sessions,
        "seconds": round(wall, 1),
        "observation": args.observation,
        "steps": steps,
        "steps_per_second": round(steps / wall, 1),
        "errors": len(errors),
        "first_errors": errors[:5],
        "served": {kind: _percentiles(v) for kind, v in sorted(times.items())},
        "in_process": {kind: _percentiles(v) for kind, v in sorted(local.items())},
        "server_before": before,
        "server_at_end": peak,
        "server_after_close": after,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
