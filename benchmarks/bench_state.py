"""The cost of checking served states, against a bare execute, measured side by side in one run.

Run from the repository root::

    python benchmarks/bench_state.py [--backend local] [--data DIR] [--rounds 3]

Without ``--data`` the bundled dataset is used (built into the cache the first time). For every
trajectory, in alternating rounds (so drift in machine load hits both alike):

* **checked**: an episode with a do-nothing agent (next-cell, static observation), each sample served
  and checked against its recorded fingerprint (the env's default);
* **unchecked**: the same episode with the recorded fingerprints hidden from the env, so nothing is
  requested or compared;
* **bare**: ``1+1`` on the same kernel, 20 times per round.

Printed: per served sample, the median time of both episodes and their difference (the check's cost),
the check's cost in bare executes (goal: at most 1x), and where the cost lies: the in-kernel
fingerprint of the served states (median, max) and the host's comparison. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rich.console import Console
from rich.table import Table

from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.replay.dataset import Dataset
from themisto_env.state.check import diff_fingerprints, expected_fingerprint


def episode_seconds(env: ThemistoEnv, tid: str) -> tuple[float, int]:
    """Wall time of one do-nothing episode and the number of samples served."""
    started = time.perf_counter()
    env.reset(options={"trajectory": tid})
    served, terminated = 1, False
    while not terminated:
        _, _, terminated, _, info = env.step(Prediction(text=""))
        served += not terminated
        assert terminated or info["state"]["check"] in ("verified", "unchecked"), info["state"]
    return time.perf_counter() - started, served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="local", help="local (default), docker, bwrap")
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled one)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians over them)")
    args = parser.parse_args()
    console = Console()
    console.print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; backend={args.backend}")
    # served eagerly (the default serves a static episode's state only when a tool needs it: nothing to time)
    options = {"task": "next-cell", "observation": "static", "backend": args.backend, "lazy_state": False}
    checked = ThemistoEnv(**options, dataset=args.data)
    shared = Dataset.open(args.data, backend=args.backend)  # the process's one: the checked env's
    hidden = Dataset(shared.path, shared.manifest)  # trajectories of its own, read anew
    for trajectory in hidden.trajectories.values():  # hide the recordings: nothing to check against
        trajectory.fingerprint_version = -1
    unchecked = ThemistoEnv(**options, dataset=hidden)
    try:
        per_sample = {"checked": [], "unchecked": []}
        bare: list[float] = []
        for _ in range(args.rounds):
            for tid in checked.episode.episode_ids:
                for name, env in (("checked", checked), ("unchecked", unchecked)):
                    seconds, served = episode_seconds(env, tid)
                    per_sample[name].append(seconds / served)
            kernel = checked.episode.tool_context().kernel
            for _ in range(20):
                started = time.perf_counter()
                kernel.execute("1+1")
                bare.append(time.perf_counter() - started)
        # Where the cost lies: the fingerprint of every served state, in the kernel and on the host.
        kernel = checked.episode.tool_context().kernel
        inside, compare = [], []
        for tid in checked.episode.episode_ids:
            trajectory = checked.episode.trajectories[tid]
            for sample in checked.episode.episode_samples[tid][
                :: max(1, len(checked.episode.episode_samples[tid]) // 8)
            ]:
                checked.reset(options={"trajectory": tid, "sample": checked.episode.episode_samples[tid].index(sample)})
                kernel = checked.episode.tool_context().kernel  # a reset may serve the state on another kernel
                result = kernel.execute(
                    "import time as _t, sys as _s\n_a = _t.perf_counter()\n"
                    "_s.modules['_themisto_helper'].namespace_fingerprint()\nprint(_t.perf_counter() - _a)"
                )
                inside.append(float(result.text().strip()))
                live = kernel.introspect.fingerprint()
                started = time.perf_counter()
                diff_fingerprints(expected_fingerprint(trajectory, sample.step) or {}, live)
                compare.append(time.perf_counter() - started)
    finally:
        checked.close()
        unchecked.close()
    ms = 1000.0
    with_check, without = statistics.median(per_sample["checked"]), statistics.median(per_sample["unchecked"])
    bare_s = statistics.median(bare)
    cost = with_check - without
    table = Table(title="state check per served sample (bundled data)" if args.data is None else "state check")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("served sample, checked (median)", f"{with_check * ms:.2f} ms")
    table.add_row("served sample, unchecked (median)", f"{without * ms:.2f} ms")
    table.add_row("check cost per served sample", f"{cost * ms:.2f} ms")
    table.add_row("bare `1+1` execute (median)", f"{bare_s * ms:.2f} ms")
    table.add_row("check cost / bare execute", f"{cost / bare_s:.2f}x")
    table.add_row(
        "fingerprint in the kernel (median / max)", f"{statistics.median(inside) * ms:.2f} / {max(inside) * ms:.2f} ms"
    )
    table.add_row("comparison on the host (median)", f"{statistics.median(compare) * ms:.3f} ms")
    console.print(table)
    verdict = "met" if cost <= bare_s else "missed"
    console.print(f"goal (check cost at most 1x a bare execute): {verdict}")


if __name__ == "__main__":
    main()
