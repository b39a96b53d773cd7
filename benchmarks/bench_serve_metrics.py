"""``/metrics`` scraped under the server's load test: scrape errors (goal 0), what a scrape costs, and whether
the counters agree with what the clients did. Loopback only, bounded in time.

Run from the repository root::

    python benchmarks/bench_serve_metrics.py [--sessions 32] [--seconds 120] [--interval 0.5]

A ``themisto serve`` is started on a free 127.0.0.1 port (local backend, the bundled data, ``--max-sessions``
= sessions) and loaded by the sessions of ``bench_serve.py`` (its session loop: reset at a random sample, two
tool calls, a prediction, every round trip timed), while one client scrapes ``/metrics`` every ``--interval``
seconds and parses each answer with ``prometheus_client``'s parser. Printed and written as JSON: steps and
step errors, scrapes and scrape errors, scrape latency p50 / p99, the largest sessions open and kernels alive
seen, the tool calls the server counted against the ones the clients made, states served by route, faults
by kind, and the process tree's PSS at its largest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
from bench_serve import _percentiles, _session, start_server
from prometheus_client.parser import text_string_to_metric_families


def _figures(text: str) -> dict[str, float]:
    """The scrape's samples by name and labels (``name{k=v,...}``)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            if "le" not in sample.labels:
                found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def _sum(figures: dict[str, float], prefix: str) -> dict[str, float]:
    return {key.removeprefix(prefix): value for key, value in figures.items() if key.startswith(prefix)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between scrapes (0: back to back)")
    parser.add_argument("--out", default=None, help="also write the result here (JSON)")
    args = parser.parse_args()

    server, url = start_server(["--max-sessions", str(args.sessions)])
    stop = threading.Event()
    scrape_times: list[float] = []
    scrape_errors: list[str] = []
    peaks: dict[str, float] = defaultdict(float)

    def scrape() -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                start = time.perf_counter()
                try:
                    answer = http.get(f"{url}/metrics")
                    answer.raise_for_status()
                    figures = _figures(answer.text)
                except Exception as exc:  # counted and reported
                    scrape_errors.append(f"{type(exc).__name__}: {exc}"[:300])
                else:
                    scrape_times.append(time.perf_counter() - start)
                    for key in (
                        "themisto_sessions_open",
                        "themisto_kernels_alive{placement=host}",
                        "themisto_process_tree_memory_bytes{measure=pss}",
                    ):
                        peaks[key] = max(peaks[key], figures[key])
                stop.wait(args.interval)

    try:
        times: dict[str, list[float]] = defaultdict(list)
        errors: list[str] = []
        scraper = threading.Thread(target=scrape, name="scraper")
        scraper.start()

        async def load() -> float:
            started = time.monotonic()
            until = started + args.seconds
            await asyncio.gather(*(_session(url, until, i, times, errors) for i in range(args.sessions)))
            return time.monotonic() - started

        try:
            wall = asyncio.run(load())
        finally:
            stop.set()
            scraper.join(timeout=120)
        final = _figures(httpx.get(f"{url}/metrics", timeout=60).text)  # after the last step
    finally:
        server.terminate()
        server.wait(timeout=60)
    steps = sum(len(v) for v in times.values())
    tools_counted = sum(_sum(final, "themisto_tool_call_seconds_count{tool=").values())
    result = {
        "sessions": args.sessions,
        "seconds": round(wall, 1),
        "steps": steps,
        "step_errors": len(errors),
        "first_step_errors": errors[:5],
        "scrapes": len(scrape_times),
        "scrape_errors": len(scrape_errors),
        "first_scrape_errors": scrape_errors[:5],
        "scrape": _percentiles(scrape_times),
        "served": {kind: _percentiles(v) for kind, v in sorted(times.items())},
        "most_sessions_open": peaks["themisto_sessions_open"],
        "most_kernels_alive": peaks["themisto_kernels_alive{placement=host}"],
        "largest_tree_pss_mib": round(peaks["themisto_process_tree_memory_bytes{measure=pss}"] / 2**20),
        "tool_calls_made": len(times["tool"]),
        "tool_calls_counted": tools_counted,
        "states_served": {
            k.rstrip("}"): v for k, v in _sum(final, "themisto_state_serve_seconds_count{route=").items()
        },
        "faults": {k.rstrip("}"): v for k, v in _sum(final, "themisto_faults_total{kind=").items() if v},
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
