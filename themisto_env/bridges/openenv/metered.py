"""A served session's episode, metered: the env's own parts (a state server, a scorer) that report to the
server's `themisto_env.bridges.openenv.server_metrics.ServerMetrics` what they do, and
`open_metered_episode`, an `Episode` over them.

The parts behave exactly as the env's (each method calls the env's and only looks at what it did), so a
session is paid what the gym env pays. What is counted, where it happens:

* a state served: its time by route; the faults met and recovered from on the way; a state mismatch;
* a tool call: its time by tool (the state served for it left out, counted as serving);
* a fault: once, where it is met (a failed serve, a recovery, a tried cell's disposable kernel, a
  prediction run for the execution score);
* an execution-score run, by outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from themisto_env.bridges.openenv.server_metrics import ServerMetrics, route_of
from themisto_env.data.samples import Sample
from themisto_env.env.config import env_config_and_dataset
from themisto_env.env.episode import Episode
from themisto_env.env.kernel_spec import env_kernel_spec
from themisto_env.env.outcomes import ToolOutcome
from themisto_env.env.scorer import Scorer
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import ToolCall
from themisto_env.errors import InfrastructureError
from themisto_env.scoring.score import ExecutionRun
from themisto_env.state.check import StateReport
from themisto_env.state.copies import CodeRun

__all__ = ["MeteredScorer", "MeteredStateServer", "close_metered_episode", "open_metered_episode"]


class MeteredStateServer(StateServer):
    """A `themisto_env.env.state_server.StateServer` that reports to ``metrics`` (see the module
    docstring); the other arguments are the state server's."""

    def __init__(self, metrics: ServerMetrics, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = metrics
        self._serving_s = 0.0  # time spent serving states, so far (a tool call's own time leaves it out)
        self._recovered = False  # whether a recovery ran during the tool call under way

    def serve(self) -> StateReport:
        start = time.perf_counter()
        try:
            report = super().serve()
        except InfrastructureError as exc:
            self._served("failed", start)
            self.metrics.fault(exc)
            raise
        self._served(route_of(report), start)
        for fault in report.faults:
            self.metrics.fault(fault)
        if report.check == "mismatch":
            self.metrics.state_mismatch()
        return report

    def _served(self, route: str, start: float) -> None:
        seconds = time.perf_counter() - start
        self._serving_s += seconds
        self.metrics.served(route, seconds)

    def recover(self, error: InfrastructureError) -> list[str]:
        self.metrics.fault(error)
        self._recovered = True
        return super().recover(error)

    def call_tool(self, call: ToolCall, try_code: Callable[[str], CodeRun] | None = None) -> ToolOutcome:
        serving, self._recovered = self._serving_s, False
        start = time.perf_counter()
        try:
            outcome = super().call_tool(call, try_code)
        finally:
            self.metrics.tool_called(call.tool, time.perf_counter() - start - (self._serving_s - serving))
        if outcome.result is None and not self._recovered and outcome.faults:
            self.metrics.fault(outcome.faults[-1])  # a tried cell's disposable kernel failed: not recovered here
        return outcome


class MeteredScorer(Scorer):
    """A `themisto_env.env.scorer.Scorer` whose execution-score runs report to ``metrics``; the
    other arguments are the scorer's."""

    def __init__(self, metrics: ServerMetrics, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = metrics

    def execution_run(self, sample: Sample) -> ExecutionRun | None:
        run = super().execution_run(sample)
        if run is None:
            return None
        metrics = self.metrics

        def counted(code: str) -> Any:
            try:
                executed = run(code)
            except InfrastructureError as exc:
                metrics.execution_run("fault")
                metrics.fault(exc)
                raise
            metrics.execution_run("scored" if executed is not None else "nothing_recorded")
            return executed

        return counted


def open_metered_episode(options: Mapping[str, Any], metrics: ServerMetrics) -> Episode:
    """An episode over ``options`` (as `Episode.open`) on
    metered parts; close it with `close_metered_episode` (the episode does not own parts it is given).

    Raises:
        ConfigError: Bad options (nothing is left open).
    """
    config, dataset = env_config_and_dataset(dict(options))
    spec = env_kernel_spec(config, dataset)  # once, for both parts
    server = MeteredStateServer(metrics, config, dataset, spec=spec)
    try:
        scorer = MeteredScorer(metrics, config, dataset, spec=spec)
    except BaseException:
        server.close()
        raise
    try:
        return Episode(config, dataset, server=server, scorer=scorer)
    except BaseException:
        scorer.close()
        server.close()
        raise


def close_metered_episode(episode: Episode) -> None:
    """Close an episode of `open_metered_episode` and its parts. Idempotent."""
    try:
        episode.close()
    finally:
        try:
            episode.server.close()
        finally:
            episode.scorer.close()
