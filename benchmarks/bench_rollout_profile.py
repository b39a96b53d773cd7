"""Where a multi-turn rollout's time goes (issue "copies at the kernel's round trip"), with timers.

Run from the repository root (the bundled data is built into the cache the first time)::

    python benchmarks/bench_rollout_profile.py [--rollouts 40] [--fork/--no-fork] [--cprofile N]

The rollout is ``bench_fork.py``'s: in a warm env (tools mode, next-cell), ``reset`` at a random sample
(seeded), ``list_variables``, ``memory_usage``, a prediction. Timers wrap the parts a rollout passes
through (serving the state and its routes, the fingerprint and files checks, each tool, the scoring) and
every request to the kernel (``KernelMessaging.run``: one round trip each), so the table says where the
time goes and how many round trips each part makes. A bare ``1+1`` on the env's kernel is measured
between rollouts. With ``--cprofile N`` the N costliest functions (cumulative) of the rollouts are printed
too. Parts nest (serving holds the restore): the "self" column is a part's time less its timed children.
Beside each rollout the same rollout runs, in a second env of its own, as before issue 38 (every tool asks
the kernel; not in the table): the mean and p90 of both are printed.

Nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from themisto_env.env import scorer, state_server
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall, _observations
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel import messaging as kernel_messaging
from themisto_env.sandbox.kernel import snapshots as kernel_snapshots
from themisto_env.sandbox.template.shared import close_shared_templates
from themisto_env.state import kernel as state


class Timers:
    """Wall time and calls per part, and a part's own time (less its timed children)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.own: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.trips: dict[str, int] = defaultdict(int)  # kernel round trips made inside each part
        self.stack: list[list[Any]] = []
        self.on = False

    def wrap(self, owner: Any, attribute: str, label: str | Callable[..., str]) -> None:
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return original(*args, **kwargs)
            name = label(*args, **kwargs) if callable(label) else label
            frame = [name, 0.0]
            self.stack.append(frame)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - started
                self.stack.pop()
                self.total[name] += seconds
                self.own[name] += seconds - frame[1]
                self.calls[name] += 1
                if self.stack:
                    self.stack[-1][1] += seconds
                if name.startswith("kernel round trip"):
                    for outer in {f[0] for f in self.stack}:
                        self.trips[outer] += 1

        setattr(owner, attribute, timed)


def install(timers: Timers) -> None:
    timers.wrap(ThemistoEnv, "reset", "env.reset")
    timers.wrap(
        ThemistoEnv,
        "step",
        lambda self, action: f"env.step {getattr(action, 'tool', None) or type(action).__name__}",
    )
    timers.wrap(state_server.StateServer, "serve", "serve the state")
    timers.wrap(state.TrajectoryKernel, "_restore", "restore (or fork) a snapshot")
    timers.wrap(state.TrajectoryKernel, "_fork_state", "fork a copy of the state")
    timers.wrap(state.TrajectoryKernel, "_forward", "replay forward")
    timers.wrap(state.TrajectoryKernel, "_set_files", "put the working folder's files")
    timers.wrap(state.TrajectoryKernel, "_file_differences", "check the working folder")
    timers.wrap(state, "diff_fingerprints", "compare fingerprints")
    timers.wrap(kernel_snapshots.KernelSnapshots, "restore", "restore request")
    timers.wrap(state_server, "run_tool", lambda call, ctx: f"tool {call.tool}")
    timers.wrap(scorer.Scorer, "score", "score the prediction")
    timers.wrap(
        kernel_messaging.KernelMessaging,
        "run",
        lambda self, code, **kw: "kernel round trip (" + ("helper call" if kw.get("silent") else "cell") + ")",
    )


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


def rollout(env: ThemistoEnv, choice: tuple[str, int]) -> None:
    env.reset(options={"trajectory": choice[0], "sample": choice[1]})
    env.step(ToolCall(tool="list_variables"))
    env.step(ToolCall(tool="memory_usage"))
    env.step(Prediction(text="df.head()"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument("--no-fork", action="store_true")
    parser.add_argument("--cprofile", type=int, default=0, help="print the N costliest functions")
    args = parser.parse_args()
    console = Console()
    dataset = Dataset.open()
    samples = dataset.samples("next-cell")
    choices = sorted({dataset.episode_position(s.id) for s in samples})
    rng = random.Random(0)
    picks = [rng.choice(choices) for _ in range(args.rollouts)]
    timers = Timers()
    install(timers)
    env = ThemistoEnv(task="next-cell", observation="tools", fork=not args.no_fork)
    env_before = ThemistoEnv(task="next-cell", observation="tools", fork=not args.no_fork)  # its own kernel
    profile = cProfile.Profile() if args.cprofile else None
    times, bare, before = [], [], []
    kept_answers = _observations._memory_from_listing
    try:
        rollout(env, picks[0])  # warm-up: the kernel starts
        rollout(env_before, picks[0])
        for choice in picks:
            # beside each rollout, the same one as before issue 38 (every tool asks the kernel), untimed parts
            _observations._memory_from_listing = lambda ctx: None  # type: ignore[assignment]
            started = time.perf_counter()
            rollout(env_before, choice)
            before.append(time.perf_counter() - started)
            _observations._memory_from_listing = kept_answers
            timers.on = True
            if profile is not None:
                profile.enable()
            started = time.perf_counter()
            rollout(env, choice)
            times.append(time.perf_counter() - started)
            if profile is not None:
                profile.disable()
            timers.on = False
            kernel = env.episode.tool_context().kernel
            started = time.perf_counter()
            kernel.execute("1+1")
            bare.append(time.perf_counter() - started)
    finally:
        _observations._memory_from_listing = kept_answers
        env.close()
        env_before.close()
        close_shared_templates()
    n = len(times)
    mean, b = statistics.mean(times), statistics.median(bare)
    console.print(
        f"{n} rollouts ({'no fork' if args.no_fork else 'fork'}): mean {mean * 1000:.1f} ms, "
        f"bare 1+1 {b * 1000:.2f} ms, {mean / b:.1f}x; p90 {p90(times) * 1000:.1f} ms. The same rollouts with every "
        f"tool asking the kernel (before): mean {statistics.mean(before) * 1000:.1f} ms, "
        f"{statistics.mean(before) / b:.1f}x, p90 {p90(before) * 1000:.1f} ms"
    )
    table = Table("part", "per rollout ms", "self ms", "calls per rollout", "round trips per rollout", "share")
    for name in sorted(timers.total, key=lambda k: -timers.total[k]):
        table.add_row(
            name,
            f"{timers.total[name] / n * 1000:.2f}",
            f"{timers.own[name] / n * 1000:.2f}",
            f"{timers.calls[name] / n:.2f}",
            f"{timers.trips.get(name, 0) / n:.2f}",
            f"{timers.total[name] / sum(times):.0%}",
        )
    console.print(table)
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.cprofile)
        console.print(out.getvalue())


if __name__ == "__main__":
    main()
