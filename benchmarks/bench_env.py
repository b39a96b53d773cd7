"""Overhead of the gymnasium env over executing the same cells with nbclient, and tool call latency.

Run from the repository root::

    python benchmarks/bench_env.py [--backend local] [--data DIR] [--repeat 1] [--trajectory ID]

Without ``--data`` the bundled dataset is used (``resolve_dataset``; built into the cache the first
time, which takes minutes). Medians over ``--repeat`` after an untimed warm-up:

* an episode with a do-nothing agent (``Prediction(text="")`` every sample; task next-cell,
  observation static): ``reset`` to termination, vs ``nbclient.NotebookClient`` executing the
  trajectory's sources (python3 ipykernel) from kernel start to the end; the overhead percent
  (goal <= 10%);
* ``env.step(ToolCall(tool="list_variables"))`` (observation tools) vs a bare ``1+1`` execute on the
  env's kernel, interleaved (goal: within 1.5x).

Nothing is asserted; goals are printed as met or missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import nbformat
from nbclient import NotebookClient
from rich.console import Console
from rich.table import Table

from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall


def run_episode(env: ThemistoEnv, tid: str) -> int:
    env.reset(options={"trajectory": tid})
    steps, terminated = 0, False
    while not terminated:
        _, _, terminated, _, _ = env.step(Prediction(text=""))
        steps += 1
    return steps


def run_nbclient(sources: list[str]) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=True).execute()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="local", help="local (default), docker, bwrap")
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled one)")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per figure (median)")
    parser.add_argument("--trajectory", default=None, help="trajectory id (default: the first)")
    args = parser.parse_args()
    console = Console()
    console.print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; backend={args.backend}")

    # served eagerly: the default serves a static episode's state only when a tool needs it (nothing would run)
    env = ThemistoEnv(task="next-cell", observation="static", dataset=args.data, backend=args.backend, lazy_state=False)
    # By default a trajectory without a restart midway: nbclient cannot restart, so it would not compare.
    no_restart = [
        t for t in env.episode.episode_ids if not any(s.restarted_before for s in env.episode.trajectories[t].steps[1:])
    ]
    tid = args.trajectory or (no_restart or env.episode.episode_ids)[0]
    trajectory = env.episode.trajectories[tid]
    sources = [s.source for s in trajectory.steps]
    if any(s.restarted_before for s in trajectory.steps[1:]):
        console.print("[yellow]note: the trajectory restarts its kernel midway; nbclient does not[/yellow]")
    run_episode(env, tid)  # warm-up
    run_nbclient(sources)
    env_times, nb_times, samples = [], [], 0
    for _ in range(args.repeat):
        env.close()  # the episode pays for its kernel start, as nbclient does
        started = time.perf_counter()
        samples = run_episode(env, tid)
        env_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        run_nbclient(sources)
        nb_times.append(time.perf_counter() - started)
    env.close()

    tools_env = ThemistoEnv(
        task="next-cell", observation="tools", dataset=args.data, backend=args.backend, tool_budget=10**6
    )
    tools_env.reset(options={"trajectory": tid})
    kernel = tools_env.episode.tool_context().kernel
    for _ in range(3):
        tools_env.step(ToolCall(tool="list_variables"))
        kernel.execute("1+1")
    tool_t, plus_t = [], []
    for _ in range(max(20, 10 * args.repeat)):
        started = time.perf_counter()
        tools_env.step(ToolCall(tool="list_variables"))
        tool_t.append(time.perf_counter() - started)
        started = time.perf_counter()
        kernel.execute("1+1")
        plus_t.append(time.perf_counter() - started)
    tools_env.close()

    env_s, nb_s = statistics.median(env_times), statistics.median(nb_times)
    tool_s, plus_s = statistics.median(tool_t), statistics.median(plus_t)
    overhead = (env_s / nb_s - 1) * 100
    ratio = tool_s / plus_s
    table = Table(title=f"env overhead ({args.backend}, trajectory {tid}: {len(sources)} cells, {samples} samples)")
    for col in ("measure", "median", "goal", "met"):
        table.add_column(col)
    table.add_row("episode, do-nothing agent (s)", f"{env_s:.2f}", "", "")
    table.add_row("nbclient, same cells (s)", f"{nb_s:.2f}", "", "")
    table.add_row("env overhead", f"{overhead:+.1f}%", "<= 10%", "yes" if overhead <= 10 else "NO")
    table.add_row('step(ToolCall("list_variables")) (ms)', f"{tool_s * 1000:.2f}", "", "")
    table.add_row("1+1 execute (ms)", f"{plus_s * 1000:.2f}", "", "")
    table.add_row("tool step / 1+1", f"{ratio:.2f}x", "<= 1.5x", "yes" if ratio <= 1.5 else "NO")
    console.print(table)


if __name__ == "__main__":
    main()
