"""What tracing costs a rollout (issue 36): tracing off, on with a no-op exporter, on with the JSON-lines file
exporter, side by side in one run.

Run from the repository root (needs the trace extra; the bundled data is built into the cache the first time)::

    python benchmarks/bench_trace.py [--rounds 60]

One warm env (the bundled data, next-cell, tools mode, local kernels, forking on: the default). A rollout is a
multi-turn episode's work: reset at a random sample, two tool calls (``list_variables``, ``memory_usage``), a
prediction. Each round runs the same rollout once in each mode, in a rotating order (so that drift and a busy
machine fall on every mode alike), each after an untimed reset and tool call at a sample of another trajectory
(so that every timed rollout copies its state in: a fork or a restore, as a new rollout does); the modes:

* **off**: no tracer provider (the hooks are the shared no-op; the episode's stopwatch still runs);
* **no-op exporter**: opentelemetry-sdk's ``TracerProvider`` with a ``BatchSpanProcessor`` whose exporter drops
  the spans (the cost of making and ending the spans);
* **file**: the same with [`JsonLinesSpanExporter`][themisto_env.trace_export.JsonLinesSpanExporter]
  (``themisto run --trace FILE``).

Printed: per mode the mean, p90 and median in ms, the spans per rollout, each mode's figures over off's, the
mean CPU time of this process per rollout (``time.process_time``: the work tracing adds is this process's; a
busy machine blurs wall times far more), and what one ``with tracing.span(...)`` costs in that mode (a loop
of 20,000, µs).
Nothing is asserted; the goal (on within 5% of off) is printed as met or missed, and beside it an estimate that
a busy machine does not blur: spans per rollout times one span's cost over off's, against off's median.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from rich.console import Console
from rich.table import Table

from themisto_env import trace_export, tracing
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.template.shared import close_shared_templates


class DroppingExporter:
    """An exporter that counts the spans and drops them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def span_cost(provider: Any, count: int = 20000) -> float:
    """Seconds per ``with tracing.span(...)`` (with two attributes and one recorded) under ``provider``."""
    tracing.set_provider(provider)
    try:
        started = time.perf_counter()
        for _ in range(count):
            with tracing.span("themisto.bench", {"themisto.step": 1, "themisto.tool.name": "x"}) as span:
                tracing.record(span, {"themisto.tool.ok": True})
        return (time.perf_counter() - started) / count
    finally:
        tracing.set_provider(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    console = Console()
    dataset = Dataset.open()
    choices = sorted({dataset.episode_position(s.id) for s in dataset.samples("next-cell")})
    console.print(
        f"bundled data: {len(choices)} next-cell samples; {args.rounds} rounds; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    folder = Path(tempfile.mkdtemp(prefix="themisto-bench-trace-"))
    dropped = DroppingExporter()
    written = trace_export.JsonLinesSpanExporter(folder / "trace.jsonl")
    providers: dict[str, Any] = {"off": None}
    for name, exporter in (("no-op exporter", dropped), ("file", written)):
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        providers[name] = provider
    env = ThemistoEnv(task="next-cell", observation="tools")
    rng = random.Random(0)

    cpu: dict[str, list[float]] = {name: [] for name in providers}  # this process's CPU seconds per rollout

    def rollout(choice: tuple[str, int], mode: str | None = None) -> float:
        started, used = time.perf_counter(), time.process_time()
        env.reset(options={"trajectory": choice[0], "sample": choice[1]})
        env.step(ToolCall(tool="list_variables"))
        env.step(ToolCall(tool="memory_usage"))
        env.step(Prediction(text="df.head()"))
        if mode is not None:
            cpu[mode].append(time.process_time() - used)
        return time.perf_counter() - started

    times: dict[str, list[float]] = {name: [] for name in providers}
    try:
        for provider in providers.values():  # warm: templates, states, the sdk's imports
            tracing.set_provider(provider)
            rollout(rng.choice(choices))
        modes = list(providers)
        for number in range(args.rounds):
            choice = rng.choice(choices)
            away = rng.choice([c for c in choices if c[0] != choice[0]])
            for name in modes[number % 3 :] + modes[: number % 3]:
                tracing.set_provider(None)
                env.reset(options={"trajectory": away[0], "sample": away[1]})  # each rollout copies its state in
                env.step(ToolCall(tool="list_variables"))
                tracing.set_provider(providers[name])
                times[name].append(rollout(choice, name))
    finally:
        tracing.set_provider(None)
        env.close()
        close_shared_templates()
    for provider in providers.values():
        if provider is not None:
            provider.force_flush()
    lines = sum(1 for _ in (folder / "trace.jsonl").open())
    per_rollout = {"off": 0.0, "no-op exporter": dropped.spans / (args.rounds + 1), "file": lines / (args.rounds + 1)}
    # (the spans counted include the warm-up rollout's: one more per mode)
    base_mean, base_p90 = statistics.mean(times["off"]), p90(times["off"])
    costs = {name: span_cost(provider) for name, provider in providers.items()}
    for provider in providers.values():
        if provider is not None:
            provider.shutdown()
    base_median = statistics.median(times["off"])
    base_cpu = statistics.mean(cpu["off"])
    table = Table(
        "multi-turn rollout", "mean ms", "p90 ms", "median ms", "spans / rollout", "mean / off", "p90 / off",
        "median / off", "CPU ms here", "CPU / off", "one span µs",
    )  # fmt: skip
    for name, values in times.items():
        table.add_row(
            name,
            f"{statistics.mean(values) * 1000:.1f}",
            f"{p90(values) * 1000:.1f}",
            f"{statistics.median(values) * 1000:.1f}",
            f"{per_rollout[name]:.1f}",
            f"{statistics.mean(values) / base_mean:.3f}",
            f"{p90(values) / base_p90:.3f}",
            f"{statistics.median(values) / base_median:.3f}",
            f"{statistics.mean(cpu[name]) * 1000:.2f}",
            f"{statistics.mean(cpu[name]) / base_cpu:.3f}",
            f"{costs[name] * 1e6:.2f}",
        )
    console.print(table)
    worst = max(statistics.mean(times[n]) / base_mean for n in ("no-op exporter", "file"))
    console.print(f"goal: tracing on within 5% of off (mean): {worst:.3f}x: {'met' if worst <= 1.05 else 'missed'}")
    for name in ("no-op exporter", "file"):  # robust to a busy machine: the spans' own cost over a typical rollout
        extra = per_rollout[name] * (costs[name] - costs["off"])
        console.print(
            f"{name}: {per_rollout[name]:.1f} spans x {(costs[name] - costs['off']) * 1e6:.0f} µs = "
            f"{extra * 1000:.2f} ms per rollout, {extra / base_median:.1%} of off's median rollout"
        )
    console.print(f"spans written to {folder / 'trace.jsonl'}")


if __name__ == "__main__":
    main()
