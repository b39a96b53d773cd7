"""States shared by a group of episodes: `StateGroup`, one state server per sample for the episodes of that
sample (a GRPO group's rollouts), the scorer they share, and the one cache of their read-only tool answers."""

from __future__ import annotations

import contextlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator

from themisto_env.data.samples import Sample
from themisto_env.env.config import EnvConfig
from themisto_env.env.kernel_spec import env_kernel_spec
from themisto_env.env.outcomes import ToolOutcome
from themisto_env.env.scorer import Scorer
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import TOOLS, ToolCall, ToolResult
from themisto_env.errors import ConfigError, InfrastructureError
from themisto_env.replay.dataset import Dataset
from themisto_env.state.check import StateReport, fault_text
from themisto_env.state.copies import CodeRun

__all__ = ["StateGroup"]


class StateGroup:
    """The state servers a group of episodes shares, their scorer, and the one cache of tool answers.

    Episodes of one sample over a group (a GRPO group's rollouts) share one server (one kernel) in its
    state, up to ``max_kernels`` samples at once (the least recently used one moves to a new sample when all
    are taken); a read-only call one of them made is answered to the others from that kernel's answer
    (``cache_answers``: the state is the same and the tools are read-only), forgotten when the kernel moves
    or fails. With ``share=False`` each episode has a server of its own.

    Args:
        config: The options every episode is served and scored under.
        dataset: The dataset the samples come from.
        share: Episodes of the same sample share one kernel.
        max_kernels: With ``share``, how many samples' states are kept live at once.
        cache_answers: With ``share``, answer a repeated call (same tool, same arguments) from the group.

    Attributes:
        samples: The task's samples by id.

    A shared call's result is kept in its server's own answers (`StateProvider.answers`), the one cache,
    emptied whenever the server's state may change.
    """

    def __init__(
        self,
        config: EnvConfig,
        dataset: Dataset,
        *,
        share: bool = True,
        max_kernels: int = 4,
        cache_answers: bool = True,
    ) -> None:
        if max_kernels < 1:
            raise ConfigError(f"max_kernels must be at least 1, got {max_kernels}")
        self.config, self.dataset = config, dataset
        self.share, self.max_kernels, self.cache_answers = share, max_kernels, cache_answers and share
        #: The kind of kernel of every server and the scorer made here (built once).
        self.spec = env_kernel_spec(config, dataset)
        self.samples: dict[str, Sample] = {s.id: s for s in dataset.samples(config.task, config.sample_rule)}
        self._scorer: Scorer | None = None
        self._live: OrderedDict[str, StateServer] = OrderedDict()  # sample id -> its shared server
        self._own: weakref.WeakKeyDictionary[object, StateServer] = weakref.WeakKeyDictionary()  # share=False
        self._owned: list[StateServer] = []  # every server made here (closed by close())
        self._lock = threading.RLock()  # the map of servers (never held while waiting for a server's lock)
        self._server_locks: dict[StateServer, threading.RLock] = {}  # a server's kernel work, one call at a time
        self._closed = False

    def scorer(self) -> Scorer:
        """The scorer of the episodes' predictions (closed by `close`)."""
        with self._lock:
            self._check_open()
            if self._scorer is None:
                self._scorer = Scorer(self.config, self.dataset, spec=self.spec)
            return self._scorer

    def server_for(self, sample_id: str, owner: object = None) -> StateServer:
        """The server of ``sample_id``'s state, moved to it if it served another sample: the sample's shared
        server, or (without sharing) ``owner``'s own."""
        with self._serving(sample_id, owner) as server:
            return server

    def call_tool(
        self, owner: object, sample_id: str, call: ToolCall, try_code: Callable[[str], CodeRun] | None
    ) -> tuple[ToolOutcome, StateReport | None]:
        """Answer ``owner``'s call from the group's answers or the sample's server; the outcome, and how the
        state was served (None: answered from the group). The machinery failing (a lost backend, a state that
        cannot be selected) is a fault of the outcome, never the tool's answer. Calls on different samples'
        servers run at once; calls on one server, one at a time."""
        tool = TOOLS.get(call.tool)
        shared = self.cache_answers and tool is not None and tool.read_only
        key = f"tool/{call.tool}/{json.dumps(call.args, sort_keys=True)}"
        try:
            with self._serving(sample_id, owner) as server:
                cached = server.answers.get(key) if shared else None  # the server is at the sample's state
                if isinstance(cached, ToolResult):
                    return ToolOutcome(cached), None
                outcome = server.call_tool(call, try_code)
                report = server.report
                if (
                    shared
                    and not outcome.faults
                    and outcome.result is not None
                    and (report is None or report.check != "mismatch")
                ):
                    server.answers[key] = outcome.result
                return outcome, report
        except InfrastructureError as exc:
            return ToolOutcome(None, (fault_text(exc),)), None

    @contextlib.contextmanager
    def _serving(self, sample_id: str, owner: object) -> Iterator[StateServer]:
        """The sample's server, held (its lock) and at the sample's state. Which server serves which sample is
        decided under the group's lock, the kernel work under the server's: a server moved to another sample
        while this waited for it is claimed again."""
        sample = self.samples[sample_id]
        while True:
            server = self._claim(sample_id, owner)
            with self._server_locks[server]:
                with self._lock:
                    still = self._own.get(owner) if not self.share and owner is not None else self._live.get(sample_id)
                if still is not server:
                    continue
                at = server.trajectory
                if at is None or at.id != sample.trajectory_id or server.step != sample.step:
                    server.select(self.dataset.trajectories[sample.trajectory_id], sample.step)
                    server.warm_up()
                yield server
                return

    def _claim(self, sample_id: str, owner: object) -> StateServer:
        """The server to serve ``sample_id`` (the group's map of servers only: no kernel work)."""
        with self._lock:
            self._check_open()
            if not self.share and owner is not None:
                server = self._own.get(owner) or self._new_server()
                self._own[owner] = server
            elif sample_id in self._live:
                self._live.move_to_end(sample_id)
                server = self._live[sample_id]
            else:
                if len(self._live) < self.max_kernels:
                    server = self._new_server()
                else:
                    _, server = self._live.popitem(last=False)  # the least recently used state moves on
                self._live[sample_id] = server
            return server

    def _new_server(self) -> StateServer:
        server = StateServer(self.config, self.dataset, spec=self.spec)
        self._owned.append(server)
        self._server_locks[server] = threading.RLock()
        return server

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError("the shared states are closed")

    def close(self) -> None:
        """Close every server, kernel and scorer made here. Idempotent."""
        with self._lock:
            self._closed = True
            servers, self._owned = self._owned, []
            self._live.clear()
            scorer, self._scorer = self._scorer, None
        for server in servers:
            with self._server_locks[server]:  # after the call it is making
                server.close()
        if scorer is not None:
            scorer.close()

    def __enter__(self) -> StateGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
