"""RL at speed: rollouts, resets and episodes against the kernel's own round trip, side by side in one run.

Run from the repository root::

    python benchmarks/bench_rl.py [--backend local] [--data DIR] [--rollouts 60] [--resets 3]

Without ``--data`` the bundled dataset is used (built into the cache the first time). Task next-cell.
Each figure is measured for the env as it is now (lazy state, warm kernels) and, beside it, for the
eager env (``lazy_state=False, warm_kernels=0``: every sample served as it begins, kernels started and
restarted in place), the way the env worked before:

* **rollout** (tools mode): ``reset`` at a random sample (seeded), two tool calls (``list_variables``,
  ``memory_usage``), a prediction; in a warm env (its kernel started), interleaved with a bare ``1+1``
  on the env's own kernel. Printed: rollouts per second and one rollout in bare executes (goal: <= 8);
* **reset** into the middle sample of a trajectory, to the observation (``reset``) and to the served live
  state (``reset`` then ``serve_state()``), against replaying the cells that lead to that sample in a new
  kernel (start, then every recorded cell before it): in the *first* env of its kind in the process; in
  a *new* env (constructed, untimed) while another env of the kind is open (it shares its warm kernels;
  between two new envs the pool is left to refill, untimed, as it would between episodes); and in a
  *warm* env whose kernel is at another sample. Goal: a reset in a new env >= 10x faster than the replay;
* **episode**: a do-nothing agent from the first sample to the end (static mode: nothing needs the live
  state), and the same with ``serve_state()`` at every sample (every state served and checked, as an
  agent calling a tool at every sample needs, without the tool's own cost), against executing the same
  cells straight through in a new kernel. Goal: within 10%.

* **GRPO step** (the env's side of one step of multi-turn GRPO through TRL's ``environment_factory``,
  `themisto_env.bridges.rl.tool_env`, no model): ``--prompts`` random samples x ``--generations`` rollouts,
  in TRL's order (every rollout reset; then each calls ``list_variables``; then each ``memory_usage``;
  then ``submit`` and ``get_reward``), with the group's rollouts sharing one kernel and with a kernel per
  rollout (instances reused across steps, as TRL does). The first step (kernels start) and the median
  of the later ones.

Nothing is asserted; goals are printed as met or missed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from themisto_env.bridges.rl.tool_env import SharedStates
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.sandbox.kernel.core import Kernel

EAGER: dict[str, Any] = {"lazy_state": False, "warm_kernels": 0}


def make_env(args: argparse.Namespace, eager: bool, **options: Any) -> ThemistoEnv:
    return ThemistoEnv(
        task="next-cell", backend=args.backend, dataset=args.data, **({**EAGER} if eager else {}), **options
    )


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def rollout(env: ThemistoEnv, choice: tuple[str, int]) -> None:
    env.reset(options={"trajectory": choice[0], "sample": choice[1]})
    env.step(ToolCall(tool="list_variables"))
    env.step(ToolCall(tool="memory_usage"))
    env.step(Prediction(text="df.head()"))


def rollouts(env: ThemistoEnv, choices: list[tuple[str, int]]) -> tuple[float, float]:
    """Median rollout and median bare ``1+1`` on the env's kernel, interleaved."""
    rollout(env, choices[0])  # warm-up: the kernel starts
    times, bare = [], []
    for choice in choices:
        times.append(timed(lambda c=choice: rollout(env, c)))  # type: ignore[misc]
        kernel = env.episode.tool_context().kernel  # the same kernel unless a state needed a fresh one
        bare.append(timed(lambda k=kernel: k.execute("1+1")))
    return statistics.median(times), statistics.median(bare)


def replay_seconds(args: argparse.Namespace, sources: list[str]) -> float:
    """A new kernel, then the cells executed straight through."""
    started = time.perf_counter()
    with Kernel(args.backend) as kernel:
        for source in sources:
            kernel.execute(source)
        return time.perf_counter() - started


def episode(env: ThemistoEnv, tid: str, *, serve: bool) -> None:
    env.reset(options={"trajectory": tid})
    terminated = False
    while not terminated:
        if serve:
            env.episode.serve_state()
        terminated = env.step(Prediction(text=""))[2]


def grpo_steps(
    args: argparse.Namespace, share: bool, batches: list[list[str]], generations: int
) -> tuple[float, list[float], int]:
    """The env's side of GRPO steps; returns the first step's seconds, the later ones', kernels used."""
    with SharedStates(task="next-cell", share=share, backend=args.backend, dataset=args.data) as states:
        rollouts = [states.factory()() for _ in range(len(batches[0]) * generations)]
        times = []
        for batch in batches:
            started = time.perf_counter()
            for rollout, sample_id in zip(rollouts, [s for s in batch for _ in range(generations)], strict=True):
                rollout.reset(sample_id=sample_id)
            for rollout in rollouts:
                rollout.list_variables()
            for rollout in rollouts:
                rollout.memory_usage()
            for rollout in rollouts:
                rollout.submit("df.head()")
                rollout.get_reward()
            times.append(time.perf_counter() - started)
        return times[0], times[1:], len(states._owned)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="local", help="local (default), docker, bwrap")
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled one)")
    parser.add_argument("--rollouts", type=int, default=60, help="rollouts per env (medians)")
    parser.add_argument("--resets", type=int, default=3, help="resets into a new env (medians)")
    parser.add_argument("--prompts", type=int, default=2, help="GRPO: prompts per step")
    parser.add_argument("--generations", type=int, default=4, help="GRPO: rollouts per prompt (group size)")
    parser.add_argument("--grpo-steps", type=int, default=6, help="GRPO: steps (the first is reported apart)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console()
    console.print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; backend={args.backend}")
    rng = random.Random(args.seed)
    probe = make_env(args, eager=False)
    choices = [(tid, i) for tid in probe.episode.episode_ids for i in range(len(probe.episode.episode_samples[tid]))]
    picks = [rng.choice(choices) for _ in range(args.rollouts)]
    # A trajectory without a restart midway (straight execution cannot restart), its middle sample.
    plain = [
        t
        for t in probe.episode.episode_ids
        if not any(s.restarted_before for s in probe.episode.trajectories[t].steps[1:])
    ]
    tid = (plain or probe.episode.episode_ids)[0]
    trajectory = probe.episode.trajectories[tid]
    middle = len(probe.episode.episode_samples[tid]) // 2
    step = probe.episode.episode_samples[tid][middle].step
    probe.close()
    rows: list[tuple[str, str, str, str, str]] = []

    def goal(name: str, value: float, text: str, limit: float, higher: bool) -> None:
        met = value >= limit if higher else value <= limit
        rows.append((name, "", "", text, "yes" if met else "NO"))

    # -- rollouts ---------------------------------------------------------------------------------------
    figures: dict[str, tuple[float, float]] = {}
    for eager in (True, False):
        env = make_env(args, eager, observation="tools", tool_budget=10**6)
        try:
            figures["eager" if eager else "lazy"] = rollouts(env, picks)
        finally:
            env.close()
    for name, (roll, bare) in figures.items():
        rows.append((f"rollout, {name} env (ms)", f"{roll * 1000:.1f}", f"{1 / roll:.1f}/s", "", ""))
        rows.append(("  1+1 on its kernel (ms)", f"{bare * 1000:.2f}", f"{roll / bare:.1f} executes", "", ""))
    roll, bare = figures["lazy"]
    goal("rollout / 1+1 (lazy, warm)", roll / bare, "<= 8", 8, higher=False)

    # -- resets -----------------------------------------------------------------------------------------
    replay = statistics.median(replay_seconds(args, [s.source for s in trajectory.steps[:step]]) for _ in range(3))
    rows.append((f"replay {step} cells in a new kernel (s)", f"{replay:.3f}", "", "", ""))
    target = {"trajectory": tid, "sample": middle}
    for eager in (True, False):
        name = "eager" if eager else "lazy"
        first = make_env(args, eager, observation="tools")  # the first env of its kind in the process
        try:
            first_reset = timed(lambda e=first: e.reset(options=target))
            first_served = first_reset + timed(first.episode.serve_state)
        finally:
            first.close()
        keeper = make_env(args, eager, observation="tools")  # another env of the kind stays open
        try:
            keeper.reset(options={"trajectory": picks[0][0], "sample": picks[0][1]})
            keeper.episode.serve_state()
            new_reset, new_served, warm = [], [], []
            for _ in range(args.resets):
                if keeper.episode.server.pool is not None:  # untimed: let the shared pool refill, as between episodes
                    while not keeper.episode.server.pool.ready:
                        time.sleep(0.05)
                env = make_env(args, eager, observation="tools")
                try:
                    new_reset.append(timed(lambda e=env: e.reset(options=target)))
                    new_served.append(new_reset[-1] + timed(env.episode.serve_state))
                finally:
                    env.close()
            for pick in picks[1 : 1 + max(5, args.resets)]:
                keeper.reset(options={"trajectory": pick[0], "sample": pick[1]})
                keeper.episode.serve_state()  # the kernel is somewhere else
                warm.append(timed(lambda e=keeper: e.reset(options=target)) + timed(keeper.episode.serve_state))
        finally:
            keeper.close()
        r, s, w = statistics.median(new_reset), statistics.median(new_served), statistics.median(warm)
        for label, value in (
            (f"reset, first env, {name}: observation (s)", first_reset),
            (f"reset, first env, {name}: state served (s)", first_served),
            (f"reset, new env, {name}: observation (s)", r),
            (f"reset, new env, {name}: state served (s)", s),
            (f"reset, warm env, {name}: state served (s)", w),
        ):
            rows.append((label, f"{value:.3f}", f"{replay / value:.1f}x faster", "", ""))
        if not eager:
            goal("new env reset vs replay (observation)", replay / r, ">= 10x", 10, higher=True)
            goal("new env reset vs replay (state served)", replay / s, ">= 10x", 10, higher=True)

    # -- episodes ---------------------------------------------------------------------------------------
    sources = [s.source for s in trajectory.steps]
    straight = statistics.median(replay_seconds(args, sources) for _ in range(2))
    rows.append((f"straight execution, {len(sources)} cells (s)", f"{straight:.2f}", "", "", ""))
    for eager in (True, False):
        name = "eager" if eager else "lazy"
        for serve in (False, True):
            if eager and serve:
                continue  # the eager env serves every state anyway
            times = []
            for _ in range(2):
                env = make_env(args, eager, observation="static")
                try:  # a new env each time: the episode pays for its kernel as straight execution does
                    times.append(timed(lambda e=env, s=serve: episode(e, tid, serve=s)))
                finally:
                    env.close()
            t = statistics.median(times)
            mode = "every state served and checked" if serve else "do-nothing"
            over = (t / straight - 1) * 100
            rows.append((f"episode, {name}, {mode} (s)", f"{t:.2f}", f"{over:+.0f}%", "", ""))
            if not eager:
                goal(f"episode vs straight ({'served' if serve else 'do-nothing'})", over, "<= +10%", 10, higher=False)

    # -- GRPO steps ---------------------------------------------------------------------------------------
    ids = [sample.id for sample in probe.episode.samples]
    batches = [rng.sample(ids, args.prompts) for _ in range(args.grpo_steps)]
    grpo = {share: grpo_steps(args, share, batches, args.generations) for share in (False, True)}
    rollouts_per_step = args.prompts * args.generations
    for share, (first_s, later, kernels) in grpo.items():
        name = "shared per group" if share else "a kernel per rollout"
        rows.append((f"GRPO step, {name}: first (s)", f"{first_s:.2f}", f"{kernels} kernels", "", ""))
        rows.append(
            (
                f"GRPO step, {name}: later (s)",
                f"{statistics.median(later):.3f}",
                f"{rollouts_per_step} rollouts",
                "",
                "",
            )
        )
    speedup = statistics.median(grpo[False][1]) / statistics.median(grpo[True][1])
    rows.append(("GRPO step, sharing speed-up (later steps)", "", f"{speedup:.1f}x", "", ""))

    table = Table(title=f"RL at speed ({args.backend}; reset/episode trajectory {tid}, sample {middle} = step {step})")
    for col in ("measure", "median", "ratio", "goal", "met"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
