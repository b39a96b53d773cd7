"""The execution score's cost per sample, against a bare execute, measured side by side in one run.

Run from the repository root::

    python benchmarks/bench_execution.py [--backend docker] [--data DIR] [--rounds 3] [--trajectories N]

Without ``--data`` the bundled dataset is used (built into the cache the first time). For every
trajectory (the first ``N`` with ``--trajectories``), in alternating rounds (so drift in machine load
hits all alike):

* **scored**: a whole episode (next-cell, static observation) with ``execution_score=True``, each
  sample predicted with its real target cell, so the prediction is also run and its score is high;
* **text-only**: the same episode and predictions with ``execution_score=False``;
* **bare**: ``1+1`` on a started kernel of the same backend, 20 times per round.

Printed: the load average and core count, then per trajectory and over all of them the median time
per sample of both episodes, their difference (the execution score's cost per sample), that cost in
bare executes, the mean execution score obtained, and how many samples reported ``prediction_failed``,
``infrastructure_error`` or no execution score (all three should be 0). Nothing is asserted.
Only the public API is used, so the script measures any version of the env alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.sandbox.kernel.core import Kernel

BARE_PER_ROUND = 20


@dataclass
class Outcome:
    """What the scored episodes reported, summed over rounds."""

    scores: list[float] = field(default_factory=list)
    failed: int = 0
    infrastructure: int = 0
    unscored: int = 0
    reasons: list[str] = field(default_factory=list)  # what failed, as reported

    def add(self, other: Outcome) -> None:
        self.scores += other.scores
        self.failed += other.failed
        self.infrastructure += other.infrastructure
        self.unscored += other.unscored
        self.reasons += other.reasons


def episode(env: ThemistoEnv, tid: str) -> tuple[float, Outcome]:
    """Seconds of one whole episode predicting the real target cells, and what it reported."""
    trajectory = env.episode.trajectories[tid]
    samples = env.episode.episode_samples[tid]
    outcome = Outcome()
    started = time.perf_counter()
    env.reset(options={"trajectory": tid})
    for sample in samples:
        _, _, terminated, _, info = env.step(Prediction(text=trajectory.steps[sample.step].source))
        value = info.get("execution_score")
        if value is None:
            outcome.unscored += 1
        else:
            outcome.scores.append(float(value))
        for key in ("prediction_failed", "infrastructure_error"):
            if info.get(key):
                outcome.reasons.append(f"{tid} step {sample.step}: {key}: {str(info[key])[:200]}")
        outcome.failed += bool(info.get("prediction_failed"))
        outcome.infrastructure += bool(info.get("infrastructure_error"))
        if terminated:
            break
    return time.perf_counter() - started, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="docker", help="docker (default), local, bwrap")
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled one)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians over them)")
    parser.add_argument("--trajectories", type=int, default=None, help="only the first N trajectories")
    args = parser.parse_args()
    console = Console()
    if console.width < 160:  # not a wide terminal (or a file): keep the table's columns whole
        console = Console(width=160)
    console.print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; backend={args.backend}")
    scored = ThemistoEnv(
        task="next-cell", observation="static", backend=args.backend, dataset=args.data, execution_score=True
    )
    text_only = ThemistoEnv(
        task="next-cell", observation="static", backend=args.backend, dataset=args.data, execution_score=False
    )
    tids = scored.episode.episode_ids[: args.trajectories]
    seconds: dict[str, dict[str, list[float]]] = {tid: {"scored": [], "text": []} for tid in tids}  # per round
    outcomes = {tid: Outcome() for tid in tids}
    bare: list[float] = []
    began = time.perf_counter()
    try:
        with Kernel(args.backend) as kernel:
            kernel.execute("1+1")  # warm up
            for round_no in range(1, args.rounds + 1):
                for tid in tids:
                    took, outcome = episode(scored, tid)
                    seconds[tid]["scored"].append(took)
                    outcomes[tid].add(outcome)
                    took, _ = episode(text_only, tid)
                    seconds[tid]["text"].append(took)
                for _ in range(BARE_PER_ROUND):
                    started = time.perf_counter()
                    kernel.execute("1+1")
                    bare.append(time.perf_counter() - started)
                console.print(f"round {round_no}/{args.rounds} done at {time.perf_counter() - began:.0f} s")
    finally:
        scored.close()
        text_only.close()
    ms = 1000.0
    bare_s = statistics.median(bare)
    source = "bundled data" if args.data is None else args.data
    table = Table(title=f"execution score per sample ({source}, backend={args.backend}, {args.rounds} rounds)")
    for name in ("trajectory", "samples", "scored (ms)", "text-only (ms)", "cost (ms)", "cost / bare"):
        table.add_column(name, justify="left" if name == "trajectory" else "right")
    for name in ("mean score", "failed", "infra err", "unscored"):
        table.add_column(name, justify="right")

    def row(label: str, samples: int, with_score: list[float], without: list[float], outcome: Outcome) -> None:
        """A row from per-round episode seconds: medians over the rounds, per sample."""
        a, b = statistics.median(with_score) / samples, statistics.median(without) / samples
        mean = f"{statistics.mean(outcome.scores):.3f}" if outcome.scores else "-"
        table.add_row(
            label,
            str(samples),
            f"{a * ms:.1f}",
            f"{b * ms:.1f}",
            f"{(a - b) * ms:.1f}",
            f"{(a - b) / bare_s:.1f}x",
            mean,
            str(outcome.failed),
            str(outcome.infrastructure),
            str(outcome.unscored),
        )

    total = Outcome()
    for tid in tids:
        row(tid, len(scored.episode.episode_samples[tid]), seconds[tid]["scored"], seconds[tid]["text"], outcomes[tid])
        total.add(outcomes[tid])
    # Over all trajectories: each round's episodes summed, so every sample weighs alike.
    rounds = range(args.rounds)
    table.add_section()
    row(
        "all",
        sum(len(scored.episode.episode_samples[tid]) for tid in tids),
        [sum(seconds[tid]["scored"][r] for tid in tids) for r in rounds],
        [sum(seconds[tid]["text"][r] for tid in tids) for r in rounds],
        total,
    )
    console.print(table)
    for reason in dict.fromkeys(total.reasons):  # each distinct one once
        console.print(reason, markup=False, highlight=False)
    console.print(
        f"bare `1+1` execute (median of {len(bare)}): {bare_s * ms:.2f} ms; "
        f"wall time {time.perf_counter() - began:.0f} s"
    )


if __name__ == "__main__":
    main()
