"""Samples per second of an LLM run against a slow provider, by ``--max-connections``, side by side.

A stand-in OpenAI-compatible server on 127.0.0.1 answers every call after ``--latency`` seconds (1 s by
default, a typical hosted model); ``llm-static`` runs through the real langchain-openai client over the
same bundled samples with 1 connection and with ``--connections`` (8), each into a fresh folder, timed end
to end (env start, dataset load, kernels, model calls). The ratio is the issue's goal: 8 connections at
least 6x the throughput of 1 on this 2-core machine::

    python benchmarks/bench_connections.py [--samples 48] [--latency 1.0] [--connections 8] [--task output]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stand-in server lives in the tests

from tests.agents.test_provider_errors import StandIn, ok
from themisto_env.run.config import RunConfig
from themisto_env.run.runner import run


def timed_run(server: StandIn, args: argparse.Namespace, connections: int, out: Path) -> tuple[float, int, int]:
    """(seconds, samples scored, most calls the server saw at once) of one run."""
    server.play(default=ok(delay=args.latency))
    config = RunConfig(
        agent="llm-static",
        model="openai/stand-in",
        base_url=server.base_url,
        model_args={"api_key": "bench", "timeout": 60.0},
        task=args.task,
        limit=args.samples,
        max_connections=connections if connections > 1 else None,
    )
    started = time.perf_counter()
    summary = run(config, out, progress=False)
    return time.perf_counter() - started, summary["samples"], server.max_in_flight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per model call")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--task", default="output")
    args = parser.parse_args()
    server = StandIn()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-connections-") as tmp:
            print(f"llm-static, {args.task}, {args.samples} bundled samples, {args.latency:g} s per model call")
            print(f"{'connections':>12} {'seconds':>9} {'samples/s':>10} {'most at once':>13}")
            rates = {}
            for connections in (1, args.connections):
                seconds, samples, peak = timed_run(server, args, connections, Path(tmp) / f"c{connections}")
                rates[connections] = samples / seconds
                print(f"{connections:>12} {seconds:>9.1f} {rates[connections]:>10.2f} {peak:>13}")
            ratio = rates[args.connections] / rates[1]
            print(f"{args.connections} connections: {ratio:.1f}x the samples per second of 1 (goal: at least 6x)")
    finally:
        server.close()


if __name__ == "__main__":
    main()
