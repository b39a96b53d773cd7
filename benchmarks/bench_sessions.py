"""Sessions per node: N OpenEnv sessions open at once on one ``themisto serve``, their memory and their
tool-call latency while all are open (issue "copies at the kernel's round trip").

Run from the repository root::

    python benchmarks/bench_sessions.py [--sessions 64 --sessions 256 --sessions 500] [--calls 5] \
        [--probe list_variables|kernel|both]

For each N, a ``themisto serve`` is started on a free 127.0.0.1 port (local backend, the bundled data,
tools mode, ``--max-sessions N``, no idle timeout). N WebSocket sessions connect (at most ``--opening`` at
a time) and each resets at its own sample (seeded) and calls ``list_variables`` once: the session is open
and its state served. Then, with all N open, each session calls ``list_variables`` once, one session at a
time (the others open and idle: the latency of a call), and then every session calls it ``--calls`` times,
all at once (the machine's throughput: on 2 cores, N calls at once queue behind each other): p50 / p90.
Printed per N: the time to open all (a session's p50 per phase: connect, reset, first call; the CPU an
opening took per session, in the server and in its live descendants), the
server's PSS (its process and every descendant, ``/proc/PID/smaps_rollup``) per session, the live kernels, the
server's threads and open descriptors, the calls' p50 / p90, errors, and how many calls found their
state not served (``info["state"]["check"]`` after the call is checked anew: the session's kernel was
replaced meanwhile). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_serve import start_server

from themisto_env.bridges.openenv.client import ThemistoEnvClient
from themisto_env.bridges.openenv.models import ThemistoAction

LIST = ThemistoAction.call("list_variables")
#: A call that reaches the kernel every time (an unknown name: the kernel's helper answers with the nearest
#: names); ``list_variables`` is answered from the state's kept answers after a session's first call.
KERNEL_PROBE = ThemistoAction.call("inspect_variable", name="_no_such_variable")
PROBES = {"kernel": KERNEL_PROBE, "list_variables": LIST}  # "both": the kernel first (kept answers may serve it after)


def descendants(root: int) -> list[int]:
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


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user and system), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_figures(pid: int) -> dict[str, Any]:
    tree = [pid, *descendants(pid)]
    kernels = states = 0
    for child in tree:
        try:
            comm = Path(f"/proc/{child}/comm").read_text().strip()
        except OSError:
            continue
        kernels += comm == "ipykernel"
        states += comm == "themisto-state"
    try:
        threads = len(os.listdir(f"/proc/{pid}/task"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        threads = fds = 0
    return {
        "pss_mib": sum(pss_kib(p) for p in tree) / 1024,
        "kernels": kernels,
        "state_templates": states,
        "threads": threads,
        "fds": fds,
        "server_cpu_s": cpu_s(pid),
        "descendants_cpu_s": sum(cpu_s(p) for p in tree[1:]),  # the live ones (kernels, templates)
    }


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else float("nan")


async def run(url: str, sessions: int, calls: int, opening: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    seeds = [rng.randrange(2**31) for _ in range(sessions)]
    clients: list[ThemistoEnvClient | None] = [None] * sessions
    errors: list[str] = []
    gate = asyncio.Semaphore(opening)
    phases: dict[str, list[float]] = {"connect": [], "reset": [], "first call": []}

    async def open_one(i: int) -> None:
        async with gate:
            client = ThemistoEnvClient(url, message_timeout_s=600)
            try:
                begun = time.perf_counter()
                await client.connect()  # the WebSocket; the session's env is made on the server's pool
                connected = time.perf_counter()
                await client.reset(seed=seeds[i])  # the episode (no kernel yet)
                reset = time.perf_counter()
                await client.step(LIST)  # the session's kernel and its state served, then the call
                done = time.perf_counter()
                for name, took in zip(phases, (connected - begun, reset - connected, done - reset), strict=True):
                    phases[name].append(took)
                clients[i] = client
            except Exception as exc:
                errors.append(f"open: {type(exc).__name__}: {exc}"[:300])
                await client.close()

    started = time.perf_counter()
    await asyncio.gather(*(open_one(i) for i in range(sessions)))
    opened = time.perf_counter() - started
    served_again = 0

    async def call(client: ThemistoEnvClient, probe: ThemistoAction, times: list[float]) -> None:
        nonlocal served_again
        try:
            begun = time.perf_counter()
            result = await client.step(probe)
            times.append(time.perf_counter() - begun)
            state = (result.observation.info or {}).get("state") or {}
            if state.get("faults"):
                served_again += 1
                errors.append(f"fault: {state['faults'][0]}"[:300])
        except Exception as exc:
            errors.append(f"call: {type(exc).__name__}: {exc}"[:300])

    async def one_at_a_time(live: list[ThemistoEnvClient], probe: ThemistoAction) -> list[float]:
        times: list[float] = []  # one session calls at a time, the others open and idle
        for client in live:
            await call(client, probe, times)
        return times

    async def all_at_once(live: list[ThemistoEnvClient], probe: ThemistoAction) -> list[float]:
        together: list[float] = []  # every session calls at once

        async def each(client: ThemistoEnvClient) -> None:
            for _ in range(calls):
                await call(client, probe, together)

        await asyncio.gather(*(each(c) for c in live))
        return together

    live = [c for c in clients if c is not None]
    return {
        "opened": len(live),
        "open_s": opened,
        "phases": phases,
        "clients": live,
        "errors": errors,
        "calls": lambda probe: one_at_a_time(live, probe),
        "calls_together": lambda probe: all_at_once(live, probe),
        "served_again": lambda: served_again,
    }


async def measure(
    url: str, pid: int, sessions: int, calls: int, opening: int, probes: list[str]
) -> list[dict[str, Any]]:
    base = server_figures(pid)
    state = await run(url, sessions, calls, opening, seed=sessions)
    opened_figures = server_figures(pid)
    await asyncio.sleep(2.0)
    held = server_figures(pid)
    timed = {}
    for probe in probes:  # each: one session at a time, then all at once
        timed[probe] = (await state["calls"](PROBES[probe]), await state["calls_together"](PROBES[probe]))
    after = server_figures(pid)
    for client in state["clients"]:
        await client.close()
    opened = max(1, state["opened"])
    shared = {
        "sessions": sessions,
        "opened": state["opened"],
        "open_s": state["open_s"],
        "open_phases_p50_ms": {
            name: round(statistics.median(took) * 1000) for name, took in state["phases"].items() if took
        },
        # CPU per opened session, the server's and its live descendants' (kernels, templates, spares)
        "open_cpu_ms_per_session": {
            where: round((opened_figures[key] - base[key]) * 1000 / opened)
            for where, key in (("server", "server_cpu_s"), ("kernels", "descendants_cpu_s"))
        },
        "pss_per_session_mib": (held["pss_mib"] - base["pss_mib"]) / opened,
        "kernels": held["kernels"],
        "kernels_after_calls": after["kernels"],
        "state_templates": held["state_templates"],
        "threads": held["threads"],
        "fds": held["fds"],
        "errors": len(state["errors"]),
        "first_errors": state["errors"][:3],
        "with_faults": state["served_again"](),
    }
    return [
        {
            **shared,
            "probe": probe,
            "p50_ms": statistics.median(times) * 1000 if times else float("nan"),
            "p90_ms": quantile(times, 0.9) * 1000,
            "calls": len(times),
            "together_p50_ms": statistics.median(together) * 1000 if together else float("nan"),
            "together_p90_ms": quantile(together, 0.9) * 1000,
        }
        for probe, (times, together) in timed.items()
    ]


def one(sessions: int, calls: int, opening: int, probes: list[str]) -> list[dict[str, Any]]:
    server, url = start_server(
        ["--max-sessions", str(sessions), "--idle-timeout", "0"], stdout=subprocess.PIPE, timeout_s=180
    )
    try:
        figures = asyncio.run(measure(url, server.pid, sessions, calls, opening, probes))
    finally:
        server.terminate()
        try:
            out, err = server.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            out, err = server.communicate()
    for each in figures:
        each["banner"] = " ".join(line for line in (out or "").splitlines() if "fit" in line)[:300]
        each["server_said"] = (err or "")[-1500:]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, action="append", help="default: 64 and 256")
    parser.add_argument("--calls", type=int, default=5, help="list_variables calls per session, all open")
    parser.add_argument("--opening", type=int, default=16, help="sessions opening at once")
    parser.add_argument(
        "--probe",
        choices=["list_variables", "kernel", "both"],
        default="list_variables",
        help="the timed call: list_variables, or one that reaches the kernel every time (inspect_variable), or "
        "both (in turn, over the same open sessions)",
    )
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (the machine may be shared); "
        f"probe {args.probe}"
    )
    header = (
        "sessions | probe | opened | open s | a session's connect / reset / first call p50 ms | "
        "opening CPU ms per session, server / kernels | PSS/session MiB | kernels | "
        "threads | fds | call p50 ms | p90 ms | "
        "all at once p50 ms | p90 ms | errors | calls with faults"
    )
    rows = [header, "|".join(" --- " for _ in header.split("|"))]
    probes = list(PROBES) if args.probe == "both" else [args.probe]
    for n in args.sessions or [64, 256]:
        for f in one(n, args.calls, args.opening, probes):
            print(f, flush=True)
            rows.append(
                f"{n} | {f['probe']} | {f['opened']} | {f['open_s']:.0f} | "
                f"{' / '.join(map(str, f['open_phases_p50_ms'].values()))} | "
                f"{' / '.join(map(str, f['open_cpu_ms_per_session'].values()))} | "
                f"{f['pss_per_session_mib']:.1f} | {f['kernels']} | "
                f"{f['threads']} | {f['fds']} | {f['p50_ms']:.1f} | {f['p90_ms']:.1f} | {f['together_p50_ms']:.0f} | "
                f"{f['together_p90_ms']:.0f} | {f['errors']} | {f['with_faults']}"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
