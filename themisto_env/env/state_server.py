"""The live state of one sample: [`StateServer`][themisto_env.env.StateServer], a kernel brought to the state before a
sample's target step and checked ([`TrajectoryKernel`][themisto_env.replay.TrajectoryKernel]), the warm kernels and
shared templates it comes from, recovery after a fault, the tools' view of that state, and the lost-backend bookkeeping.

A state server knows nothing of budgets, rewards or episodes: the gym env
([`ThemistoEnv`][themisto_env.env.ThemistoEnv], through [`Episode`][themisto_env.env.Episode]) and the
bridges select a sample's state on it, ask for it to be served when something needs the live state, and run
tool calls on it; what happened is returned (a [`StateReport`][themisto_env.replay.StateReport], the
faults met) for the caller's record. Model-written code never runs here (see
[`Scorer`][themisto_env.env.Scorer]).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Callable

from themisto_env import tracing
from themisto_env.data.trajectory import Step, Trajectory
from themisto_env.env.config import EnvConfig
from themisto_env.env.kernel_spec import env_kernel_spec
from themisto_env.env.observation import history_items, render_runtime
from themisto_env.env.outcomes import ToolOutcome, fault_text
from themisto_env.env.tools import TOOLS, ToolCall, ToolContext, run_tool
from themisto_env.errors import BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.disposable import CodeRun
from themisto_env.replay.state import TrajectoryKernel
from themisto_env.replay.state_check import StateReport, expected_fingerprint, fresh_before
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.helper import FINGERPRINT_VERSION
from themisto_env.sandbox.kernel.pool import KernelPool, shared_pool
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.ray.cluster import connect
from themisto_env.sandbox.ray.kernel import make_kernel
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.sandbox.template.shared import hold_shared_templates, release_shared_templates, template_source

__all__ = ["StateServer"]

#: The kernel kinds each open dataset was checked with in this process (`StateServer._check_dataset`): kernels
#: of one kind (one spec: backend, image, environment) answer the same package versions, so a served node's 500
#: sessions ask once, not once each (a kernel round trip, about a third of a session's opening). Keyed by the
#: dataset as opened: a dataset rebuilt in place is opened anew (`Dataset.open` sees its files change), and
#: checked again.
_CHECKED: weakref.WeakKeyDictionary[Dataset, set[str]] = weakref.WeakKeyDictionary()
_CHECKED_LOCK = threading.Lock()

log = logging.getLogger("themisto_env")


class StateServer:
    """The live state of one selected sample, served on demand and checked.

    Args:
        config: The options (backend, limits, snapshots, warm kernels, forking, Ray, ...).
        dataset: The dataset whose trajectories are served (its manifest says which packages the snapshots
            need).
        spec: The kind of kernel (`KernelSpec`; its store is read) the env built once for its parts; by
            default the config's and dataset's (`themisto_env.env.kernel_spec.env_kernel_spec`).

    Nothing starts until a state is needed: [`select`][themisto_env.env.StateServer.select] names the state,
    [`serve`][themisto_env.env.StateServer.serve] (or a tool call) brings the kernel there. Kernels come from the
    process's warm pool (after [`warm_up`][themisto_env.env.StateServer.warm_up]), or are forked from its shared
    template ([`forking`][themisto_env.env.StateServer.forking]).
    """

    def __init__(self, config: EnvConfig, dataset: Dataset, *, spec: KernelSpec | None = None) -> None:
        self.config = config
        self.dataset = dataset
        #: The kind of this server's kernels (their store read-only).
        self.spec = (spec or env_kernel_spec(config, dataset)).with_access("read")
        #: The kernel environment's id (None: the tool's own Python).
        self.environment = self.spec.environment
        self.trajectories: dict[str, Trajectory] = dict(dataset.trajectories)
        if self.spec.ray is not None:  # connected here, in the caller's thread, not in a pool's
            connect(self.spec.ray.address)
        #: The modules the dataset's cells import (preloaded in warm kernels and templates).
        self.preload = self.spec.preload
        #: Warm kernels for the served state, taken at `warm_up`.
        self.pool: KernelPool | None = None
        #: The kernel and where it is (`TrajectoryKernel.started` says whether one runs).
        self.kernel_owner = TrajectoryKernel(self._new_kernel, template=self.template_source())
        self._holds_templates = self.forking
        if self._holds_templates:  # the shared templates keep spares and states while a server forks from them
            hold_shared_templates()
        self._dataset_checked = False
        #: How the selected state was served and checked (None: not served yet).
        self.report: StateReport | None = None
        #: The selected state: a trajectory and the step about to run (None before `select`).
        self.trajectory: Trajectory | None = None
        self.step: int | None = None
        self._lost_backend: BackendUnavailableError | None = None
        #: The kernel's answers to the tools in the served state (see ``ToolContext.answers``); emptied
        #: whenever the state may change: another state selected or served, a recovery, a context handed out.
        self._answers: dict[str, object] = {}

    @property
    def forking(self) -> bool:
        """Whether kernels and copies of states are forked from a template (`KernelSpec.forks`; local and
        bwrap kernels on this machine; on docker, only the kernels for model-written code)."""
        return self.spec.forks

    def template_source(self) -> Callable[[], KernelTemplate] | None:
        """Gives the process's template for this server's kind of kernel, or None where it is not forked
        (see `themisto_env.sandbox.template.core.template_source`)."""
        return template_source(self.spec)

    def kernel_factory(self) -> Callable[[], KernelLike]:
        """Makes a new kernel of this server's kind: on this machine, or in a Ray actor (``config.ray``)."""
        return functools.partial(make_kernel, self.spec)

    def _new_kernel(self) -> KernelLike:
        return self.kernel_factory()()

    def _shared_pool(self) -> KernelPool:
        """The process's pool of warm kernels of this spec and size, shared with the other open servers of
        that kind."""
        size = self.config.warm_kernels
        # the factory, not a bound method: the process's pool must not hold this server
        return shared_pool((self.spec, size), self.kernel_factory(), size=size, preload=self.spec.preload)

    def warm_up(self) -> None:
        """Have a kernel on its way before the first state is needed (when states are served at all)."""
        if self.forking:
            return  # the template is started with the first kernel (shared by the process's servers)
        config = self.config
        if config.warm_kernels and (config.observation != "static" or not config.lazy_state):
            if self.pool is None:
                self.pool = self.kernel_owner.pool = self._shared_pool()
            self.pool.fill()

    # -- the selected state ------------------------------------------------------------------------------

    def select(self, trajectory: Trajectory, step: int) -> None:
        """Name the state now asked for (before ``step`` of ``trajectory``); nothing runs until it is needed,
        but where that state will be a copy of a state template that runs, a spare of it is forked now, in the
        background (`TrajectoryKernel.prepare`), when the state is served at all (not a lazy static one)."""
        self.trajectory, self.step = trajectory, step
        self.report = None
        self._answers = {}
        if self.forking and (self.config.observation != "static" or not self.config.lazy_state):
            with contextlib.suppress(InfrastructureError):  # the serve meets it again, and says it
                self.kernel_owner.prepare(trajectory, step)

    @property
    def served(self) -> bool:
        """Whether the selected state was served (or tried: ``report.route == "failed"``)."""
        return self.report is not None

    def _selected(self) -> tuple[Trajectory, int]:
        if self.trajectory is None or self.step is None:
            raise ConfigError("no state selected: call select() first")
        return self.trajectory, self.step

    def serve(self) -> StateReport:
        """Bring the kernel to the selected state and check it (see `report`).

        Raises:
            BackendUnavailableError: The backend is gone (nothing to recover here: the caller stops).
            InfrastructureError: The state could not be reached; `report` says ``route="failed"``.
        """
        trajectory, step = self._selected()
        self._answers = {}
        try:
            with tracing.timed("state"):  # the first kernel's start too (checking the dataset)
                self._check_dataset()
                self.report = self.kernel_owner.serve(trajectory, step)
        except BackendUnavailableError:
            raise
        except InfrastructureError:
            self.report = StateReport(trajectory.id, step, route="failed")
            raise
        return self.report

    def ensure_served(self) -> StateReport:
        """[`serve`][themisto_env.env.StateServer.serve] unless the selected state was served already."""
        return self.report if self.report is not None else self.serve()

    def served_faults(self) -> list[str]:
        """Serve the selected state unless it was; the fault met, if serving failed (nothing raised but a
        lost backend)."""
        if self.report is not None:
            return []
        try:
            self.serve()
        except BackendUnavailableError:
            raise
        except InfrastructureError as exc:
            return [fault_text(exc)]
        return []

    def recover(self, error: InfrastructureError) -> list[str]:
        """Bring a failed kernel back to the selected state. Returns the faults to record, in order: a
        failed re-serve's, then ``error`` described with its recovery."""
        self.kernel_owner.taint()
        self.report = None
        self._answers = {}
        faults = self.served_faults()
        return [*faults, f"{fault_text(error)} (recovered: kernel restarted and state restored)"]

    def recorded_figures(self) -> tuple[dict[str, int], int | None]:
        """Per-variable sizes and kernel memory recorded at build time for the selected state (what tools
        and the ``full`` mode show, so that answers do not depend on how the state was reached)."""
        trajectory, step = self._selected()
        if fresh_before(trajectory, step):
            return {}, None  # a fresh namespace: nothing recorded applies
        before = trajectory.steps[step - 1]
        return before.variables, before.memory_bytes

    def executed_steps(self) -> list[Step]:
        """The steps executed before the selected state."""
        trajectory, step = self._selected()
        return trajectory.steps[:step]

    def tool_context(
        self, try_code: Callable[[str], CodeRun] | None = None, *, keep_answers: bool = False
    ) -> ToolContext:
        """The tools' view of the selected state (its kernel started, served or not: see
        [`ensure_served`][themisto_env.env.StateServer.ensure_served]); ``try_code`` runs the ``try_cell`` tool's
        candidates ([`try_code`][themisto_env.env.Scorer.try_code]), None where cells may not be tried.

        With ``keep_answers`` (this server's own tool calls) the context shares the kernel's answers given
        in this state so far (``ToolContext.answers``); otherwise it has none, and the answers kept are
        forgotten (whoever holds the context may run code in the kernel). Answers are kept only while the
        kernel lives (a local check, no round trip): a kernel that died is found by the tool's own call, and
        recovered from, rather than answered for from memory."""
        trajectory, step = self._selected()
        sizes, memory = self.recorded_figures()
        if not keep_answers or (self._answers and not self.kernel_owner.kernel.is_alive()):
            self._answers = {}
        return ToolContext(
            kernel=self.kernel_owner.kernel,
            history=history_items(self.executed_steps()),
            recorded_sizes=sizes,
            recorded_memory=memory,
            try_code=try_code,
            recorded_fingerprint=expected_fingerprint(trajectory, step),
            answers=self._answers if keep_answers else None,
        )

    def call_tool(self, call: ToolCall, try_code: Callable[[str], CodeRun] | None = None) -> ToolOutcome:
        """Serve the selected state if needed and run one observation tool on it. A failure of the
        machinery is recovered from (the kernel restarted, the state served again) and reported in the
        outcome's faults; a failure of ``try_code``'s disposable kernel is reported, not recovered (this
        server's kernel is not involved).

        Raises:
            BackendUnavailableError: The backend is gone.
        """
        faults: list[str] = []
        with tracing.span("themisto.tool_call", {"themisto.tool.name": call.tool}, timed="tools") as span:
            try:
                faults += self.served_faults()  # a lost backend is tried once more by the recovery below
                result = run_tool(call, self.tool_context(try_code, keep_answers=True))
            except InfrastructureError as exc:
                tracing.fail(span, exc)
                tool = TOOLS.get(call.tool)
                if tool is not None and not tool.read_only and not isinstance(exc, BackendUnavailableError):
                    faults.append(fault_text(exc))  # a tool that runs code runs it in a disposable kernel: not ours
                else:
                    faults += self.recover(exc)
                return ToolOutcome(None, tuple(faults))
            tracing.record(span, {"themisto.tool.ok": result.ok, "themisto.tool.faults": len(faults)})
            if faults:
                tracing.fail(span, "; ".join(faults))
            return ToolOutcome(result, tuple(faults))

    def runtime_text(self, max_chars: int) -> str:
        """The ``full`` observation's dump of the selected state's live namespace (with the recorded sizes
        and memory).

        Raises:
            InfrastructureError: The kernel failed (see [`recover`][themisto_env.env.StateServer.recover]).
        """
        sizes, memory = self.recorded_figures()
        return render_runtime(
            self.kernel_owner.kernel, max_chars=max_chars, recorded_sizes=sizes, recorded_memory=memory
        )

    # -- a lost backend ----------------------------------------------------------------------------------

    def lose_backend(self, error: BackendUnavailableError) -> None:
        """The backend was lost after a sample was scored:
        [`raise_lost_backend`][themisto_env.env.StateServer.raise_lost_backend] raises it next."""
        self._lost_backend = error

    def raise_lost_backend(self) -> None:
        """Raise the lost backend's error, once, if one was met (see
        [`lose_backend`][themisto_env.env.StateServer.lose_backend])."""
        if self._lost_backend is not None:
            error, self._lost_backend = self._lost_backend, None
            self.kernel_owner.position = None
            raise error

    # -- the dataset and closing ---------------------------------------------------------------------------

    def _check_dataset(self) -> None:
        """Once, at the first kernel: say in one line what would keep states from being checked or
        snapshots from loading (stale fingerprints; packages the snapshots' writer had and this kernel
        has not, or has at another version). Each snapshot is still tried and checked: one that does not
        load, or loads into another state, is passed over for replay."""
        if self._dataset_checked:
            return
        self._dataset_checked = True
        if self.spec.ray is None:  # Ray places kernels on nodes that may differ: each server checks its own
            with _CHECKED_LOCK:
                kinds = _CHECKED.setdefault(self.dataset, set())
                if repr(self.spec) in kinds:
                    return
                kinds.add(repr(self.spec))
        stale = sorted(t.id for t in self.trajectories.values() if t.fingerprint_version != FINGERPRINT_VERSION)
        if stale:
            log.warning(
                "%d trajectories of %s carry no current state fingerprints (%s): their served states are not "
                "checked; rebuild the dataset with `themisto data build` to check them.",
                len(stale),
                self.dataset.path,
                ", ".join(stale[:3]) + (", ..." if len(stale) > 3 else ""),
            )
        manifest = self.dataset.manifest
        if not manifest.snapshots or not manifest.packages:
            return
        live = self.kernel_owner.kernel.introspect.package_versions(sorted(manifest.packages))
        differ = [
            f"{name} {want} (kernel: {live.get(name)})"
            for name, want in sorted(manifest.packages.items())
            if live.get(name) != want
        ]
        if differ:
            log.warning(
                "the %s kernel lacks packages the snapshots of %s were written with: %s; snapshots that do not "
                "load are replayed instead (slower). Rebuild with `themisto data build ... --backend %s`.",
                self.config.backend,
                self.dataset.path,
                ", ".join(differ),
                self.config.backend,
            )

    def close(self) -> None:
        """Close the kernel, give back this server's share of the warm pool and of the shared templates.
        Idempotent."""
        self.kernel_owner.close()
        if self.pool is not None:
            self.pool.release()  # closed with the last server that holds it
            self.pool = self.kernel_owner.pool = None
        if self._holds_templates:
            self._holds_templates = False
            release_shared_templates()

    def __enter__(self) -> StateServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
