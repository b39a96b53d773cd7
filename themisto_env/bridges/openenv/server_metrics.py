"""The server's Prometheus metrics: ``GET /metrics`` of ``themisto serve``, in Prometheus' text format.

`ServerMetrics` holds one server's metrics in a registry of its own (never ``prometheus_client``'s
global one), so two servers in one process count apart. Two kinds of figure:

* counted as the sessions work (by the metered parts of `themisto_env.bridges.openenv.metered`):
  state-serving latency by route, tool-call latency by tool, faults by kind, execution-score runs;
* read at scrape time: sessions open and their limit, kernels and kernel templates alive, the memory of
  the server's process tree.

The names and what each means are in docs/serving.md. Every label takes a bounded set of values (the
tools, the routes, the fault kinds below), whatever a client sends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from themisto_env import errors
from themisto_env.env.tools import TOOL_NAMES
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.lifetime.reaper import tracked
from themisto_env.sandbox.template.prebuild import prebuild_failures
from themisto_env.sandbox.template.shared import live_shared_templates
from themisto_env.state.check import StateReport

__all__ = [
    "FAULT_KINDS",
    "MEMORY_MAX_AGE_S",
    "ROUTES",
    "TOOL_LABELS",
    "ServerMetrics",
    "add_metrics_route",
    "fault_kind",
    "process_tree_memory",
    "route_of",
]

ROUTES = ("forward", "fork", "restore", "fresh", "failed")
"""The ``route`` label of ``themisto_state_serve_seconds``: how a state was reached (see `route_of`)."""

# the most specific first: a fault's kind is that of the first class it is an instance of
_KINDS: tuple[tuple[type[errors.InfrastructureError], str], ...] = (
    (errors.KernelDiedError, "kernel_died"),
    (errors.KernelTimeoutError, "kernel_timeout"),
    (errors.TemplateGoneError, "template_gone"),
    (errors.KernelStartError, "kernel_start"),
    (errors.SnapshotError, "snapshot"),
    (errors.ReplayDivergedError, "replay_diverged"),
    (errors.BackendUnavailableError, "backend_unavailable"),
)

FAULT_KINDS = (*(kind for _, kind in _KINDS), "infrastructure", "state_mismatch")
"""The ``kind`` label of ``themisto_faults_total``: an infrastructure error by its class (``infrastructure``:
any other), or ``state_mismatch`` (a served state still differed from the recording after repair)."""

TOOL_LABELS = (*TOOL_NAMES, "other")
"""The ``tool`` label of ``themisto_tool_call_seconds`` (``other``: a name the env does not know)."""

_STATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOOL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_COUNTED = "_themisto_metrics_counted"  # set on an exception once counted as a fault (it may be met twice)

MEMORY_MAX_AGE_S = 5.0
"""How old the process tree's memory figures may be when scraped: reading a process's PSS makes the kernel
walk its page tables, so a tree of a hundred kernels is read at most once in this time."""


def fault_kind(fault: BaseException | str) -> str:
    """The kind of a fault (one of `FAULT_KINDS`): an exception, or a fault as the env records it
    (``TypeName: message``), read by its class."""
    if isinstance(fault, str):
        found = getattr(errors, fault.split(":", 1)[0].strip(), None)
        if not (isinstance(found, type) and issubclass(found, BaseException)):
            return "infrastructure"
        kind: type[BaseException] = found
    else:
        kind = type(fault)
    for cls, name in _KINDS:
        if issubclass(kind, cls):
            return name
    return "infrastructure"


def route_of(report: StateReport) -> str:
    """The ``route`` label of a served state: ``forward`` (the recorded cells replayed from where the kernel
    was, or nothing to do), ``fork`` or ``restore`` (from a snapshot, as the report's ``served_by`` names the
    copy), ``fresh`` (replayed in a fresh kernel), ``failed`` (not reached)."""
    route = report.route
    if route == "failed":
        return "failed"
    if route.startswith("fresh"):
        return "fresh"
    if route.startswith("snapshot"):
        return "fork" if report.served_by == "fork" else "restore"
    return "forward"


def process_tree_memory(pid: int | None = None) -> tuple[int, int, int]:
    """Memory of a process and its descendants: (PSS summed, RSS summed, processes counted). PSS shares each
    page among the processes mapping it (forked kernels share their template's), so the sum is what the
    tree holds; RSS counts a shared page in every process. A process that ends while being read is left
    out; one whose PSS cannot be read (another user's) counts its RSS as its PSS."""
    try:
        root = psutil.Process(pid or os.getpid())
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0, 0
    pss = rss = counted = 0
    for process in processes:
        try:
            try:
                full = process.memory_full_info()
                resident, proportional = full.rss, full.pss
            except psutil.AccessDenied:
                resident = proportional = process.memory_info().rss
        except psutil.Error:  # gone meanwhile, a zombie, or unreadable
            continue
        pss, rss, counted = pss + proportional, rss + resident, counted + 1
    return pss, rss, counted


class ServerMetrics:
    """One server's metrics (see the module docstring).

    Args:
        max_sessions: The server's session limit.
        sessions: Gives the number of sessions open now (read at each scrape).
    """

    def __init__(self, *, max_sessions: int, sessions: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        self.max_sessions = max_sessions
        self.sessions = sessions
        self.state_seconds = Histogram(
            "themisto_state_serve_seconds",
            "Time to bring a session's kernel to a sample's state and check it, by route (forward: recorded "
            "cells replayed; fork / restore: from a snapshot; fresh: replayed in a fresh kernel; failed).",
            ["route"],
            buckets=_STATE_BUCKETS,
            registry=self.registry,
        )
        self.tool_seconds = Histogram(
            "themisto_tool_call_seconds",
            "Time of an observation tool call in a session, by tool (serving the state it needed left out; "
            "a call the sandbox failed included, with its recovery).",
            ["tool"],
            buckets=_TOOL_BUCKETS,
            registry=self.registry,
        )
        self.faults = Counter(
            "themisto_faults",
            "Infrastructure faults met by the sessions (each recovered from or reported, never scored), by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.execution_runs = Counter(
            "themisto_execution_score_runs",
            "Predictions run for the execution score, by outcome (scored; nothing_recorded: the dataset "
            "recorded no effects to compare; fault: the sandbox failed, the sample is unscored).",
            ["outcome"],
            registry=self.registry,
        )
        for route in ROUTES:  # every series present from the start, at 0
            self.state_seconds.labels(route)
        for tool in TOOL_LABELS:
            self.tool_seconds.labels(tool)
        for kind in FAULT_KINDS:
            self.faults.labels(kind)
        for outcome in ("scored", "nothing_recorded", "fault"):
            self.execution_runs.labels(outcome)
        self.registry.register(_LiveFigures(self))

    def served(self, route: str, seconds: float) -> None:
        """A state was served (or failed to be) by ``route`` (one of `ROUTES`) in ``seconds``."""
        self.state_seconds.labels(route if route in ROUTES else "forward").observe(seconds)

    def tool_called(self, tool: str, seconds: float) -> None:
        """A tool call took ``seconds``."""
        self.tool_seconds.labels(tool if tool in TOOL_NAMES else "other").observe(seconds)

    def fault(self, fault: BaseException | str) -> None:
        """Count a fault by its kind (`fault_kind`); an exception already counted is not counted again."""
        if isinstance(fault, BaseException):
            if getattr(fault, _COUNTED, False):
                return
            setattr(fault, _COUNTED, True)
        self.faults.labels(fault_kind(fault)).inc()

    def state_mismatch(self) -> None:
        """A served state still differed from the recording after repair."""
        self.faults.labels("state_mismatch").inc()

    def execution_run(self, outcome: str) -> None:
        """A prediction ran for the execution score: ``scored``, ``nothing_recorded`` or ``fault``."""
        self.execution_runs.labels(outcome).inc()

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format (the live figures read now)."""
        return bytes(generate_latest(self.registry))


class _LiveFigures(Collector):
    """The figures read at each scrape: sessions, kernels, templates, memory."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics
        self._memory: tuple[float, tuple[int, int, int]] | None = None  # when read, what was read
        self._memory_lock = threading.Lock()

    def _tree_memory(self) -> tuple[int, int, int]:
        """`process_tree_memory`, read again once `MEMORY_MAX_AGE_S` old (one reader at a time)."""
        with self._memory_lock:
            now = time.monotonic()
            if self._memory is None or now - self._memory[0] >= MEMORY_MAX_AGE_S:
                self._memory = (now, process_tree_memory())
            return self._memory[1]

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        open_, limit, kernels, templates, prebuilds, memory, processes = self._families()
        open_.add_metric([], metrics.sessions())
        limit.add_metric([], metrics.max_sessions)
        local = sum(1 for k in tracked() if isinstance(k, Kernel) and _alive(k))
        kernels.add_metric(["host"], local)
        base, states = live_shared_templates()
        templates.add_metric(["kernel"], base)
        templates.add_metric(["state"], states)
        prebuilds.add_metric([], prebuild_failures())
        pss, rss, count = self._tree_memory()
        memory.add_metric(["pss"], pss)
        memory.add_metric(["rss"], rss)
        processes.add_metric([], count)
        yield from (open_, limit, kernels, templates, prebuilds, memory, processes)

    def _families(self) -> list[Metric]:
        return [
            GaugeMetricFamily("themisto_sessions_open", "WebSocket sessions open now (each one episode)."),
            GaugeMetricFamily("themisto_sessions_limit", "Sessions the server holds at once (--max-sessions)."),
            GaugeMetricFamily(
                "themisto_kernels_alive",
                "Kernels alive that this server started on this host (sessions', spares', warm and disposable ones).",
                labels=["placement"],
            ),
            GaugeMetricFamily(
                "themisto_kernel_templates_alive",
                "Kernel templates alive on this host (kernels and copies of states are forked from them): "
                "kernel templates, and state templates under them.",
                labels=["kind"],
            ),
            CounterMetricFamily(
                "themisto_template_prebuild_failures",
                "Kernel templates (and state templates) of this process that could not build the kernel "
                "application before forking: their copies build their own after the fork, slower (each "
                "one warned with its cause).",
            ),
            GaugeMetricFamily(
                "themisto_process_tree_memory_bytes",
                "Memory of the server's process and all its descendants (local and bwrap kernels, templates; "
                "not docker kernels, which are the engine's children): PSS (shared pages divided among their "
                "users: what the tree holds) or RSS (shared pages counted in each process) summed; read at most "
                "every 5 s.",
                labels=["measure"],
            ),
            GaugeMetricFamily(
                "themisto_process_tree_processes", "Processes in the server's process tree (itself included)."
            ),
        ]


def _alive(kernel: Any) -> bool:
    try:
        return bool(kernel.is_alive())
    except Exception:  # closing meanwhile
        return False


def add_metrics_route(app: FastAPI, metrics: ServerMetrics) -> None:
    """Add ``GET /metrics`` to ``app`` (guarded by the server's token as every route but ``/health``)."""

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:  # a plain function: scraped in a worker thread, not the event loop
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
