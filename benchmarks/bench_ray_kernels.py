"""Kernels in the trainer's process vs kernels in Ray actors: the cost of a tool call, of serving a state and
of a whole rollout, side by side in one run.

Run from the repository root::

    python benchmarks/bench_ray_kernels.py [--rollouts 24] [--ray local] [--out bench-ray-kernels.json]

The same rollouts run twice on the bundled data (output task, ``tools`` observation): once with the env's
kernels on this machine, once with ``ray=ADDRESS`` (a local Ray instance by default: the actor round trip
without a network; on a cluster pass ``auto`` or ``HOST:6379``). A rollout resets to a random sample (seeded:
the same samples both ways), calls two tools (``list_variables``, ``memory_usage``) and predicts. Printed and
written as JSON: per-call latency of a tool call, a reset (serving the state) and a prediction (p50 / p99),
rollouts per second, and the ratios Ray / local (goal: a tool call within 2x of a local call). The first
rollout of each side is a warm-up (kernel starts, Ray's workers) and is not counted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.replay.dataset import Dataset

TOOLS = (ToolCall(tool="list_variables"), ToolCall(tool="memory_usage"))


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
    }


def rollouts(dataset: Dataset, count: int, seed: int, ray: str | None) -> dict[str, Any]:
    """``count`` rollouts (plus one warm-up) on one env; the latency of each kind of call."""
    env = ThemistoEnv(dataset=dataset, task="output", observation="tools", ray=ray)
    samples = [s.id for s in dataset.samples("output")]
    rng = random.Random(seed)
    timings: dict[str, list[float]] = {"reset": [], "tool": [], "predict": []}
    started = 0.0
    try:
        for n in range(count + 1):
            if n == 1:
                started = time.perf_counter()
                timings = {kind: [] for kind in timings}
            t = time.perf_counter()
            env.reset(options={"sample": rng.choice(samples)})
            env.episode.serve_state()
            timings["reset"].append(time.perf_counter() - t)
            for call in TOOLS:
                t = time.perf_counter()
                env.step(call)
                timings["tool"].append(time.perf_counter() - t)
            t = time.perf_counter()
            env.step(Prediction(text="0"))
            timings["predict"].append(time.perf_counter() - t)
        seconds = time.perf_counter() - started
    finally:
        env.close()
    return {
        "rollouts": count,
        "seconds": round(seconds, 2),
        "rollouts_per_s": round(count / seconds, 2),
        **{kind: _summary(values) for kind, values in timings.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=24, help="counted rollouts per side (default: 24)")
    parser.add_argument("--ray", default="local", help="the Ray address for the remote side (default: local)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench-ray-kernels.json", help="where to write the JSON")
    args = parser.parse_args()

    dataset = Dataset.open(None)
    local = rollouts(dataset, args.rollouts, args.seed, None)
    remote = rollouts(dataset, args.rollouts, args.seed, args.ray)
    ratios = {
        kind: round(remote[kind]["p50_ms"] / max(local[kind]["p50_ms"], 1e-6), 2)
        for kind in ("reset", "tool", "predict")
    }
    ratios["rollouts_per_s"] = round(remote["rollouts_per_s"] / max(local["rollouts_per_s"], 1e-6), 2)
    result = {"local": local, "ray": remote, "ratio_ray_over_local": ratios, "ray_address": args.ray}
    print(f"{'':<10}{'local p50/p99 ms':>20}{'ray p50/p99 ms':>20}{'ratio (p50)':>14}")
    for kind in ("reset", "tool", "predict"):
        print(
            f"{kind:<10}{local[kind]['p50_ms']:>10}/{local[kind]['p99_ms']:<9}"
            f"{remote[kind]['p50_ms']:>10}/{remote[kind]['p99_ms']:<9}{ratios[kind]:>14}"
        )
    print(
        f"rollouts per second: local {local['rollouts_per_s']}, ray {remote['rollouts_per_s']} "
        f"(ratio {ratios['rollouts_per_s']}); goal: a tool call within 2x of a local call"
    )
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
