"""Forked kernels against started ones, side by side in one run (issue "forked kernels").

Run from the repository root (the bundled data is built into the cache the first time)::

    python benchmarks/bench_fork.py [--rounds 5] [--group 8 --group 32] [--envs 6] [--rollouts 40]

Each figure is a ratio of two things measured in this process, alternating, medians (p90 where said):

* **kernel start**: a kernel forked from a warm template (the bundled data's imports done) vs a cold start
  of our kernel with those imports preloaded, vs jupyter_client's own ``start_new_kernel``; each to the
  answer of a first ``1+1``;
* **state copy** at the bundled snapshots' smallest, median and p90 sizes: a kernel forked from the
  snapshot's state template (loaded once, before) vs a restore into a warm started kernel, and vs a started
  kernel plus a restore (what a disposable kernel cost); each to a first ``1+1`` in that state;
* **a new env's first tool answer**: ``ThemistoEnv`` made, ``reset`` at a sample, ``list_variables``, with a
  template of the process already warm (a server's second session) and with forking off;
* **ExecutionReward** per completion over a group of G completions of ONE sample: forked, the group run
  together (copies announced to the state template, two at once) vs one completion after the other (before),
  and started kernels (``reward-started``); where one completion's CPU goes (``reward-profile``);
* **memory**: PSS (``/proc/PID/smaps_rollup``) of every process this one started, per open env in tools
  mode (each reset at its own sample, one tool call), forking on vs off; and of one idle kernel;
* **multi-turn rollout** (reset at a random sample, two tool calls, a prediction) in a warm env, mean and
  p90, against a bare ``1+1`` on the env's kernel;
* **a copy of a state** (``copy``), p50 and p90 to a first ``1+1``: a spare ready (and its hand-out alone,
  and its second ``1+1``: a bare execute, the floor), its replacement forked at once or later,
  against no spare, with the kernel application built before the fork and after it (as before issue 38),
  and the parts of a first cell built and warmed before it answers or not;
* **idle forked kernels' memory** (``prebuild-memory``): PSS and private pages, the application built
  before the fork and after it.
* **backends** (``--backend``, default local and docker): ExecutionReward per completion over a group of
  8 on each backend, forked (docker: copies in one template container, a uid each; bwrap, run as an
  unprivileged user: copies in one template sandbox, namespaces each) vs started, as ratios to local forked;
  and an isolated backend's new env's first tool answer.

Nothing is asserted; goals are printed as met or missed.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_client.manager import start_new_kernel
from prebuild_modes import prebuild_mode  # the benchmarks' own switch, beside this script
from rich.console import Console
from rich.table import Table

from themisto_env.bridges.rl.rewards import ExecutionReward
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.sandbox.template.shared import close_shared_templates
from themisto_env.state.copies import imported_modules


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


def ready(make: Callable[[], Kernel]) -> float:
    """Seconds to a kernel that answered a first ``1+1`` (closed after, untimed)."""
    started = time.perf_counter()
    kernel = make()
    kernel.execute("1+1")
    seconds = time.perf_counter() - started
    kernel.close()
    return seconds


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
                parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid:
                found.append(child)
                frontier.append(child)
    return found


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def tree_pss() -> int:
    return sum(pss_bytes(pid) for pid in descendants(os.getpid()))


def kernel_starts(rounds: int, preload: tuple[str, ...], template: KernelTemplate) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"jupyter_client start_new_kernel": [], "started + preload": [], "forked": []}

    def jupyter() -> None:
        manager, client = start_new_kernel(kernel_name="python3")
        client.execute_interactive("1+1", timeout=30)
        client.stop_channels()
        manager.shutdown_kernel(now=True)

    bare = KernelTemplate("local", preload=preload, snapshot_dir=template.store.root, spares=0).start()
    times["forked, no spare (the fork and ipykernel's own start)"] = []
    for _ in range(rounds):
        times["forked, no spare (the fork and ipykernel's own start)"].append(ready(bare.kernel))
        times["jupyter_client start_new_kernel"].append(timed(jupyter))
        started_kernel = Kernel("local")

        def cold(kernel: Kernel = started_kernel) -> None:
            kernel.start()
            kernel.introspect.preload(preload)
            kernel.execute("1+1")

        times["started + preload"].append(timed(cold))
        started_kernel.close()
        times["forked"].append(ready(template.kernel))
    bare.close()
    return times


def state_copies(
    rounds: int, template: KernelTemplate, digests: dict[str, str]
) -> list[tuple[str, str, float, float, float, float, float]]:
    """Per size: (label, size, forked s, forked without a spare s, restore-into-warm s, start+restore s,
    first derive s)."""
    rows = []
    bare = KernelTemplate("local", preload=template.preload, snapshot_dir=template.store.root, spares=0).start()
    with Kernel("local", snapshot_dir=template.store.root).start() as warm:
        warm.introspect.preload(template.preload)
        for label, digest in digests.items():
            derive = timed(lambda d=digest: template.state(d))
            bare.state(digest)
            forked, unspared, restored, started = [], [], [], []
            for _ in range(rounds):
                forked.append(ready(template.state(digest).kernel))
                unspared.append(ready(bare.state(digest).kernel))
                restored.append(timed(lambda d=digest: warm.snapshots.restore(d) and warm.execute("1+1")))

                def start_restore(d: str = digest) -> None:
                    with Kernel("local", snapshot_dir=template.store.root) as fresh:
                        fresh.snapshots.restore(d)
                        fresh.execute("1+1")

                started.append(timed(start_restore))
            size = template.store.path(digest).stat().st_size
            rows.append(
                (
                    label,
                    f"{size / 1e6:.2f} MB",
                    statistics.median(forked),
                    statistics.median(unspared),
                    statistics.median(restored),
                    statistics.median(started),
                    derive,
                )
            )
    bare.close()
    return rows


def copy_latency(rounds: int, preload: tuple[str, ...], store_root: Path, digest: str) -> dict[str, list[float]]:
    """A copy of one state, to its first ``1+1`` (issue "copies at the kernel's round trip"), side by side:
    with a spare ready (handed out; its hand-out alone too), the next spare forked later
    (now) or at once (before); and without one (forked on request), the kernel application
    built before the fork (now), only its shell (`prebuild_mode` ``"shell"``: the child still lists every
    loaded module and looks for startup files) or all of it after the fork (``"0"``); the parts IPython builds on
    a first cell (display formatters) built in the copy on its first cell and not warmed before it answers
    (``"app"``) or before the fork and warmed (now)."""
    kinds = (
        ("no spare, application built after the fork (before)", "0", 0, 0.0),
        ("no spare, shell built before the fork (before)", "shell", 0, 0.0),
        ("no spare, application built before the fork, the first cell's parts in the copy (before)", "app", 0, 0.0),
        ("no spare, application built before the fork", "1", 0, 0.0),
        ("spare ready, next spare forked at once (before)", "1", 1, 0.0),
        ("spare ready, the first cell's parts in the copy (before)", "app", 1, 0.05),
        ("spare ready, next spare forked 50 ms later", "1", 1, 0.05),
    )
    templates: dict[str, KernelTemplate] = {}
    for name, flag, spares, delay in kinds:
        with prebuild_mode(flag):
            templates[name] = KernelTemplate("local", preload=preload, snapshot_dir=store_root, spares=spares).start()
        templates[name].refill_delay_s = delay
    times: dict[str, list[float]] = {name: [] for name, *_ in kinds}
    for name, _, spares, *_ in kinds:
        if spares:
            times[f"{name}: the hand-out alone"] = []
            times[f"{name}: its second 1+1 (a bare execute)"] = []
    try:
        for template in templates.values():
            for _ in range(2):  # a state template keeps spares once a second copy was asked for
                template.state(digest).kernel().close()
        for _ in range(rounds):
            for name, template in templates.items():
                state = template.state(digest)
                deadline = time.monotonic() + 30
                # every template's spare forked after its last copy is ready: only this copy's own refill runs
                # beside it (not another row's)
                while time.monotonic() < deadline and any(
                    t.spares and (not t.state(digest)._spares or t.state(digest)._forking) for t in templates.values()
                ):
                    time.sleep(0.01)
                started = time.perf_counter()
                kernel = state.kernel()
                handed = time.perf_counter() - started
                kernel.execute("1+1")
                times[name].append(time.perf_counter() - started)
                if template.spares:
                    times[f"{name}: the hand-out alone"].append(handed)
                    times[f"{name}: its second 1+1 (a bare execute)"].append(timed(lambda k=kernel: k.execute("1+1")))
                kernel.close()
    finally:
        for template in templates.values():
            template.close()
    return times


def prebuilt_memory(preload: tuple[str, ...], store_root: Path, kernels: int = 8) -> dict[str, dict[str, float]]:
    """Median PSS, private and shared dirty MiB of idle forked kernels (a ``1+1`` and a listing each), the
    kernel application built after the fork (`prebuild_mode` ``"0"``, before issue 38), only its shell
    before the fork (``"shell"``), and all of it before the fork."""
    figures: dict[str, dict[str, float]] = {}
    for name, flag in (
        ("built after the fork (before)", "0"),
        ("shell built before the fork (before)", "shell"),
        ("built before the fork", "1"),
    ):
        with prebuild_mode(flag):
            template = KernelTemplate("local", preload=preload, snapshot_dir=store_root, spares=0).start()
        with template:
            opened = [template.kernel() for _ in range(kernels)]
            try:
                for kernel in opened:
                    kernel.execute("1+1")
                    kernel.introspect.list_variables()
                time.sleep(1.0)
                rows = [smaps_rollup(kernel.launcher.pid() or 0) for kernel in opened]
            finally:
                for kernel in opened:
                    kernel.close()
        figures[name] = {
            key: statistics.median(row.get(key, 0.0) for row in rows)
            for key in ("Pss", "Private_Dirty", "Shared_Dirty")
        }
    return figures


def smaps_rollup(pid: int) -> dict[str, float]:
    """A process's ``/proc/PID/smaps_rollup`` in MiB."""
    figures: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            key, value = line.split(":", 1)
            figures[key] = int(value.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return figures


def first_tool_answers(rounds: int, sample: tuple[str, int]) -> dict[str, list[float]]:
    """A new env's first tool answer: forked with the process's template warm (another env made it), with
    no template yet (the first env of a process starts it), and started (forking off)."""
    times: dict[str, list[float]] = {"fork": [], "fork, first env of the process": [], "no fork": []}
    for _ in range(rounds):
        for name, fork in (("fork", True), ("fork, first env of the process", True), ("no fork", False)):
            if name.startswith("fork, first"):
                close_shared_templates()

            def answer(f: bool = fork) -> None:
                env = ThemistoEnv(task="next-cell", observation="tools", fork=f)
                try:
                    env.reset(options={"trajectory": sample[0], "sample": sample[1]})
                    env.step(ToolCall(tool="list_variables"))
                finally:
                    env.close()

            times[name].append(timed(answer))
    return times


def execution_rewards(
    groups: list[int], rounds: int, sample_id: str, completion: str, *, started: bool = True
) -> dict[tuple[str, int], float]:
    """Seconds per completion of a group of completions of one sample, medians of ``rounds`` groups, the ways
    alternating group by group (the reward's scorer, template and state template warm): forked, the group's
    copies announced and run together (now); forked, one completion after the other (before: what
    ``ExecutionReward`` did, `Scorer.score` per completion); and started kernels (forking off; one group)."""
    per: dict[tuple[str, int], float] = {}
    with ExecutionReward(parse=False) as reward:
        reward(completions=[completion], sample_id=[sample_id])  # warm-up: scorer, template, state template
        sample = reward._samples[sample_id]
        for size in groups:
            times: dict[str, list[float]] = {"fork, group together": [], "fork, one at a time (before)": []}
            for _ in range(rounds):
                times["fork, group together"].append(
                    timed(lambda n=size: reward(completions=[completion] * n, sample_id=[sample_id] * n)) / size
                )
                times["fork, one at a time (before)"].append(
                    timed(lambda n=size: [reward.scorer.score(sample, completion) for _ in range(n)]) / size
                )
            for name, values in times.items():
                per[(name, size)] = statistics.median(values)
    if started:
        with ExecutionReward(parse=False, fork=False) as reward:
            reward(completions=[completion], sample_id=[sample_id])
            for size in groups:
                seconds = timed(lambda n=size: reward(completions=[completion] * n, sample_id=[sample_id] * n))
                per[("no fork", size)] = seconds / size
    return per


def completion_cpu(rounds: int, preload: tuple[str, ...], store_root: Path, digest: str) -> dict[str, list[float]]:
    """Where one ``ExecutionReward`` completion's CPU goes, in the copy (``/proc/PID/stat``, 10 ms ticks, so
    many rounds) and in this process (``time.process_time``): the copy's fork to its first ``kernel_info``, the
    seal, a trivial cell, the sealed fingerprint. On 2 cores, a group's throughput is bounded by their sum."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    parts = ("copy: fork to ready", "copy: seal", "copy: a cell (1+1)", "copy: sealed fingerprint")
    times: dict[str, list[float]] = {name: [] for name in (*parts, "host: fork and connect", "host: the rest")}
    with KernelTemplate("local", preload=preload, snapshot_dir=store_root, spares=0, store_access="copy") as template:
        state = template.state(digest)
        for _ in range(rounds):
            host = time.process_time()
            kernel = state.kernel()
            times["host: fork and connect"].append(time.process_time() - host)
            pid = kernel.launcher.pid() or 0
            marks = [cpu(pid)]
            host = time.process_time()
            token = kernel.introspect.seal()
            marks.append(cpu(pid))
            kernel.execute("1+1")
            marks.append(cpu(pid))
            kernel.introspect.sealed_fingerprint(token, {"canary_bench": 1})
            marks.append(cpu(pid))
            times["host: the rest"].append(time.process_time() - host)
            kernel.close()
            for name, before, after in zip(parts, [0.0, *marks[:-1]], marks, strict=True):
                times[name].append(after - before)
    return times


def memory(envs: int, choices: list[tuple[str, int]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for fork in (True, False):
        close_shared_templates()
        gc.collect()
        time.sleep(1.0)
        base = tree_pss()
        opened = []
        try:
            for choice in choices[:envs]:
                env = ThemistoEnv(task="next-cell", observation="tools", fork=fork)
                env.reset(options={"trajectory": choice[0], "sample": choice[1]})
                env.step(ToolCall(tool="list_variables"))
                opened.append(env)
            time.sleep(1.0)
            total = tree_pss() - base
            figures["fork" if fork else "no fork"] = total / envs
            kernel = opened[-1].tool_context().kernel
            pid = kernel.launcher.pid()
            figures[("fork" if fork else "no fork") + " idle kernel"] = pss_bytes(pid) if pid else 0
        finally:
            for env in opened:
                env.close()
    return figures


def rollouts(count: int, choices: list[tuple[str, int]], fork: bool) -> tuple[list[float], list[float]]:
    env = ThemistoEnv(task="next-cell", observation="tools", fork=fork)
    rng = random.Random(0)
    picks = [rng.choice(choices) for _ in range(count)]

    def one(choice: tuple[str, int]) -> None:
        env.reset(options={"trajectory": choice[0], "sample": choice[1]})
        env.step(ToolCall(tool="list_variables"))
        env.step(ToolCall(tool="memory_usage"))
        env.step(Prediction(text="df.head()"))

    try:
        one(picks[0])
        times, bare = [], []
        for choice in picks:
            times.append(timed(lambda c=choice: one(c)))
            kernel = env.episode.tool_context().kernel
            bare.append(timed(lambda k=kernel: k.execute("1+1")))
        return times, bare
    finally:
        env.close()


def backend_rewards(
    backends: list[str], size: int, rounds: int, sample_id: str, completion: str
) -> dict[tuple[str, bool], float]:
    """Seconds per completion of a group of ``size`` on each backend, forked and started: the median of
    ``rounds`` groups, the backends alternating group by group (each reward warmed first: its scorer,
    template and state template)."""
    per: dict[tuple[str, bool], float] = {}
    for fork in (True, False):
        rewards = {backend: ExecutionReward(parse=False, fork=fork, backend=backend) for backend in backends}
        try:
            times: dict[str, list[float]] = {backend: [] for backend in backends}
            for reward in rewards.values():
                reward(completions=[completion], sample_id=[sample_id])  # warm-up
            for _ in range(rounds):
                for backend, reward in rewards.items():
                    group = [completion] * size

                    def one(r: ExecutionReward = reward, g: list[str] = group) -> None:
                        r(completions=g, sample_id=[sample_id] * len(g))

                    times[backend].append(timed(one) / size)
            for backend in backends:
                per[(backend, fork)] = statistics.median(times[backend])
        finally:
            for reward in rewards.values():
                reward.close()
            close_shared_templates()
    return per


def backend_first_answers(backends: list[str], rounds: int, sample: tuple[str, int]) -> dict[str, list[float]]:
    """A new env's first tool answer on each backend (its own kernel: forked where it is, else started)."""
    times: dict[str, list[float]] = {backend: [] for backend in backends}
    for _ in range(rounds):
        for backend in backends:

            def answer(b: str = backend) -> None:
                env = ThemistoEnv(task="next-cell", observation="tools", backend=b)
                try:
                    env.reset(options={"trajectory": sample[0], "sample": sample[1]})
                    env.step(ToolCall(tool="list_variables"))
                finally:
                    env.close()

            times[backend].append(timed(answer))
    return times


def report_backends(
    console: Console, args: argparse.Namespace, sample_id: str, completion: str, first: tuple[str, int]
) -> list[tuple[str, str, bool]]:
    """The backends section: its tables, and its goals (name, value, met)."""
    backends = args.backend or ["local", "docker"]
    per = backend_rewards(backends, 8, args.rounds, sample_id, completion)
    local = per[("local", True)]
    table = Table(
        "ExecutionReward, group of 8", "forked s/completion", "started s/completion", "forked vs local forked"
    )
    for backend in backends:
        table.add_row(
            backend,
            f"{per[(backend, True)]:.3f}",
            f"{per[(backend, False)]:.3f}",
            f"{per[(backend, True)] / local:.2f}x",
        )
    console.print(table)
    goals = [
        (
            f"ExecutionReward on {b} <= 1.5x local's (group of 8)",
            f"{per[(b, True)] / local:.2f}x",
            per[(b, True)] <= 1.5 * local,
        )
        for b in backends
        if b != "local"
    ]
    answers = backend_first_answers(backends, args.rounds, first)
    table = Table("a new env's first tool answer", "median ms", "vs local")
    base = statistics.median(answers["local"]) if "local" in answers else None
    for backend, values in answers.items():
        median = statistics.median(values)
        table.add_row(backend, f"{median * 1000:.0f}", f"{median / base:.2f}x" if base else "-")
    console.print(table)
    return goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--group", type=int, action="append", help="ExecutionReward group sizes (default 8 and 32)")
    parser.add_argument("--envs", type=int, default=6)
    parser.add_argument("--rollouts", type=int, default=40)
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        help="starts, copies, copy, prebuild-memory, first, reward, reward-started, reward-profile, memory, rollouts, "
        "backends",
    )
    parser.add_argument("--backend", action="append", help="backends compared (default local and docker)")
    args = parser.parse_args()
    groups = args.group or [8, 32]
    console = Console()
    dataset = Dataset.open()
    trajectories = list(dataset.trajectories.values())
    preload = tuple(imported_modules(trajectories, submodules=True))
    samples = dataset.samples("next-cell")
    choices = sorted({dataset.episode_position(s.id) for s in samples})
    console.print(
        f"bundled data: {len(trajectories)} trajectories, {len(samples)} next-cell samples; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    goals: list[tuple[str, str, bool]] = []

    def goal(name: str, value: str, met: bool) -> None:
        goals.append((name, value, met))

    with KernelTemplate("local", preload=preload, snapshot_dir=dataset.snapshot_dir) as template:
        if "starts" not in args.skip:
            starts = kernel_starts(args.rounds, preload, template)
            table = Table("kernel start, to a first 1+1", "median ms", "vs jupyter_client")
            base = statistics.median(starts["jupyter_client start_new_kernel"])
            for name, values in starts.items():
                table.add_row(
                    name, f"{statistics.median(values) * 1000:.0f}", f"{statistics.median(values) / base:.2f}x"
                )
            console.print(table)
            forked = statistics.median(starts["forked"])
            goal("kernel from a template <= 100 ms", f"{forked * 1000:.0f} ms", forked <= 0.1)
        if "copies" not in args.skip:
            store = SnapshotStore(dataset.snapshot_dir)
            written = {s.snapshot for t in trajectories for s in t.steps if s.snapshot and s.snapshot in store}
            sizes = sorted(written, key=lambda d: store.path(d).stat().st_size)
            picked = {"smallest": sizes[0], "median": sizes[len(sizes) // 2], "p90": sizes[int(0.9 * (len(sizes) - 1))]}
            table = Table(
                "state copy, to a first 1+1",
                "snapshot",
                "forked ms",
                "forked, no spare ms",
                "restore into warm ms",
                "start + restore ms",
                "restore / fork",
                "first load (state template) ms",
            )
            rows = state_copies(args.rounds, template, picked)
            for label, size, forked, unspared, restored, started, derive in rows:
                table.add_row(
                    label,
                    size,
                    f"{forked * 1000:.1f}",
                    f"{unspared * 1000:.1f}",
                    f"{restored * 1000:.1f}",
                    f"{started * 1000:.0f}",
                    f"{restored / forked:.2f}x",
                    f"{derive * 1000:.0f}",
                )
            console.print(table)
            copies = [row[2] for row in rows]
            goal(
                "state copy p50 <= 10 ms, p90 size <= 30 ms",
                " / ".join(f"{c * 1000:.0f} ms" for c in copies),
                copies[1] <= 0.01 and copies[2] <= 0.03,
            )
    if "copy" not in args.skip:
        store = SnapshotStore(dataset.snapshot_dir)
        written = {s.snapshot for t in trajectories for s in t.steps if s.snapshot and s.snapshot in store}
        median_state = sorted(written, key=lambda d: store.path(d).stat().st_size)[len(written) // 2]
        latency = copy_latency(args.rounds * 4, preload, dataset.snapshot_dir, median_state)
        table = Table("a copy of a state (median snapshot), to a first 1+1", "p50 ms", "p90 ms")
        for name, values in latency.items():
            table.add_row(name, f"{statistics.median(values) * 1000:.1f}", f"{p90(values) * 1000:.1f}")
        console.print(table)
        spare = statistics.median(latency["spare ready, next spare forked 50 ms later"])
        bare_fork = statistics.median(latency["no spare, application built before the fork"])
        goal("state copy p50 <= 5 ms with a spare", f"{spare * 1000:.1f} ms", spare <= 0.005)
        goal("state copy p50 <= 40 ms without a spare", f"{bare_fork * 1000:.1f} ms", bare_fork <= 0.04)
    if "prebuild-memory" not in args.skip:
        table = Table("idle forked kernels (median of 8)", "PSS MiB", "private dirty MiB", "shared dirty MiB")
        for name, row in prebuilt_memory(preload, dataset.snapshot_dir).items():
            table.add_row(name, f"{row['Pss']:.1f}", f"{row['Private_Dirty']:.1f}", f"{row['Shared_Dirty']:.1f}")
        console.print(table)
    middle = choices[len(choices) // 2]
    if "first" not in args.skip:
        warm = ThemistoEnv(task="next-cell", observation="tools")  # the process's template, warm
        warm.reset(options={"trajectory": middle[0], "sample": middle[1]})
        warm.step(ToolCall(tool="list_variables"))
        try:
            answers = first_tool_answers(args.rounds, choices[0])
        finally:
            warm.close()
        manager_times = []
        for _ in range(args.rounds):

            def jupyter() -> None:
                manager, client = start_new_kernel(kernel_name="python3")
                client.execute_interactive("1+1", timeout=30)
                client.stop_channels()
                manager.shutdown_kernel(now=True)

            manager_times.append(timed(jupyter))
        jc = statistics.median(manager_times)
        table = Table("a new env's first tool answer", "median ms", "vs jupyter_client start + 1+1")
        for name, values in answers.items():
            table.add_row(name, f"{statistics.median(values) * 1000:.0f}", f"{statistics.median(values) / jc:.2f}x")
        console.print(table)
        goal(
            "new env's first tool answer <= jupyter_client's start",
            f"{statistics.median(answers['fork']) / jc:.2f}x",
            statistics.median(answers["fork"]) <= jc,
        )
    if "reward" not in args.skip:
        target = next(s for s in samples if dataset.episode_position(s.id) == middle)
        per = execution_rewards(
            groups, args.rounds, target.id, target.target, started="reward-started" not in args.skip
        )
        table = Table("ExecutionReward", *(f"group of {g}: s per completion" for g in groups))
        now = "fork, group together"
        for name in (now, "fork, one at a time (before)", "no fork"):
            if (name, groups[0]) in per:
                table.add_row(name, *(f"{per[(name, g)]:.3f}" for g in groups))
        table.add_row(
            "before / now", *(f"{per[('fork, one at a time (before)', g)] / per[(now, g)]:.2f}x" for g in groups)
        )
        console.print(table)
        goal(
            "ExecutionReward <= 0.05 s per completion (group of 8)",
            f"{per[(now, groups[0])]:.3f} s",
            per[(now, groups[0])] <= 0.05,
        )
    if "reward-profile" not in args.skip:
        store = SnapshotStore(dataset.snapshot_dir)
        written = {s.snapshot for t in trajectories for s in t.steps if s.snapshot and s.snapshot in store}
        median_state = sorted(written, key=lambda d: store.path(d).stat().st_size)[len(written) // 2]
        parts = completion_cpu(args.rounds * 4, preload, dataset.snapshot_dir, median_state)
        table = Table("CPU of one ExecutionReward completion (median snapshot)", "mean ms", "share")
        total = sum(statistics.mean(values) for values in parts.values())
        for name, values in parts.items():
            table.add_row(name, f"{statistics.mean(values) * 1000:.1f}", f"{statistics.mean(values) / total:.0%}")
        table.add_row("total (2 cores: at best half of it per completion)", f"{total * 1000:.1f}", "100%")
        console.print(table)
    if "memory" not in args.skip:
        mem = memory(args.envs, choices[:: max(1, len(choices) // args.envs)])
        table = Table("memory (PSS)", "per open env MiB", "idle kernel MiB", "sessions in 16 GiB")
        for name in ("fork", "no fork"):
            table.add_row(
                name,
                f"{mem[name] / 2**20:.1f}",
                f"{mem[name + ' idle kernel'] / 2**20:.1f}",
                f"{16 * 2**30 / mem[name]:.0f}",
            )
        console.print(table)
        goal("<= 25 MiB PSS per open env", f"{mem['fork'] / 2**20:.1f} MiB", mem["fork"] <= 25 * 2**20)
    if "rollouts" not in args.skip:
        table = Table("multi-turn rollout", "mean ms", "p90 ms", "bare 1+1 ms", "mean / bare")
        ratios = {}
        for fork in (True, False):
            times, bare = rollouts(args.rollouts, choices, fork)
            b = statistics.median(bare)
            ratios[fork] = statistics.mean(times) / b
            table.add_row(
                "fork" if fork else "no fork",
                f"{statistics.mean(times) * 1000:.1f}",
                f"{p90(times) * 1000:.1f}",
                f"{b * 1000:.2f}",
                f"{ratios[fork]:.1f}x",
            )
        console.print(table)
        goal("multi-turn rollout <= 5x a bare execute (mean)", f"{ratios[True]:.1f}x", ratios[True] <= 5)
    if "backends" not in args.skip:
        target = next(s for s in samples if dataset.episode_position(s.id) == middle)
        goals += report_backends(console, args, target.id, target.target, choices[0])
    close_shared_templates()
    table = Table("goal", "measured", "met")
    for name, value, met in goals:
        table.add_row(name, value, "yes" if met else "no")
    console.print(table)


if __name__ == "__main__":
    main()
