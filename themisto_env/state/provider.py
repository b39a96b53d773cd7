"""One way to serve a state: [`StateProvider`][themisto_env.state.StateProvider] serves a sample's state (a
trajectory and a step) and says how ([`StateReport`][themisto_env.state.StateReport]), hands out disposable
copies of it for model-written code, and closes.

How a state is reached (forward replay, a snapshot restored or forked from its template, a spare) is chosen
inside, from the [`KernelSpec`][themisto_env.sandbox.KernelSpec]: the warm pool and the shared templates are
this room's business, not its callers'.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref

from themisto_env import tracing
from themisto_env.data.trajectory import Trajectory
from themisto_env.errors import BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.helper import FINGERPRINT_VERSION
from themisto_env.sandbox.kernel.pool import KernelPool, shared_pool
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.template.shared import hold_shared_templates, release_shared_templates, template_source
from themisto_env.state.check import StateReport, fault_text
from themisto_env.state.copies import DisposableKernels
from themisto_env.state.kernel import TrajectoryKernel

__all__ = ["StateProvider"]

#: The kernel kinds each open dataset was checked with in this process (`StateProvider._check_dataset`): kernels
#: of one kind answer the same package versions, so they are asked once per process.
_CHECKED: weakref.WeakKeyDictionary[Dataset, set[str]] = weakref.WeakKeyDictionary()
_CHECKED_LOCK = threading.Lock()

log = logging.getLogger("themisto_env")


class StateProvider:
    """Serves the state of one selected sample on demand, checked, and disposable copies of states.

    Args:
        dataset: The dataset whose trajectories are served (its manifest says which packages the snapshots
            need).
        spec: The kind of kernel: backend, limits, snapshot store, environment, forking.
        warm_kernels: How many started kernels to keep ready (where kernels are not forked).
        serves: Whether states are served at all (False: only copies are handed out, or the states are
            served lazily and only if asked); nothing is started ahead for the served state then.

    Nothing starts until a state is needed: [`select`][themisto_env.state.StateProvider.select] names the
    state, [`serve`][themisto_env.state.StateProvider.serve] brings the kernel there.
    """

    def __init__(self, dataset: Dataset, spec: KernelSpec, *, warm_kernels: int = 0, serves: bool = True) -> None:
        self.dataset = dataset
        #: The kind of the served kernel (its store read-only; the copies' is copied in).
        self.spec = spec.with_access("read")
        self.trajectories: dict[str, Trajectory] = dict(dataset.trajectories)
        self.warm_kernels = warm_kernels
        self.serves = serves
        #: Warm kernels for the served state, taken at `warm_up`.
        self.pool: KernelPool | None = None
        #: The served kernel and where it is (`TrajectoryKernel.started` says whether one runs).
        self.kernel_owner = TrajectoryKernel(functools.partial(Kernel, self.spec), template=template_source(self.spec))
        #: The disposable copies model-written code runs in (None until the first is asked for).
        self.disposable: DisposableKernels | None = None
        self._disposable_lock = threading.Lock()  # one set of copies for the threads that ask at once
        self._closed = False
        # the shared templates keep spares and states while a provider forks from them (its served kernel
        # or its copies: on docker, only the copies are forked)
        self._holds_templates = self.spec.forks or self.spec.with_access("copy").forks
        if self._holds_templates:
            hold_shared_templates()
        self._dataset_checked = False
        #: How the selected state was served and checked (None: not served yet).
        self.report: StateReport | None = None
        #: The selected state: a trajectory and the step about to run (None before `select`).
        self.trajectory: Trajectory | None = None
        self.step: int | None = None
        self._lost_backend: BackendUnavailableError | None = None
        #: Answers given in the served state (the tools' cache); emptied whenever the state may change:
        #: another state selected or served, a recovery.
        self.answers: dict[str, object] = {}

    def warm_up(self) -> None:
        """Have a kernel on its way before the first state is needed (when states are served at all)."""
        if self.spec.forks or not self.warm_kernels or not self.serves:
            return  # a forked kernel needs no pool: the template starts with the first kernel
        if self.pool is None:
            size, factory = self.warm_kernels, functools.partial(Kernel, self.spec)
            # shared with the process's other providers of that kind and size
            self.pool = self.kernel_owner.pool = shared_pool(
                (self.spec, size), factory, size=size, preload=self.spec.preload
            )
        self.pool.fill()

    # -- the served state --------------------------------------------------------------------------------

    def select(self, trajectory: Trajectory, step: int) -> None:
        """Name the state now asked for (before ``step`` of ``trajectory``); nothing runs until it is
        needed, but where it will be a copy of a state template that runs, a spare is forked now, in the
        background (when states are served at all)."""
        self.trajectory, self.step = trajectory, step
        self.report = None
        self.answers = {}
        if self.spec.forks and self.serves:
            with contextlib.suppress(InfrastructureError):  # the serve meets it again, and says it
                self.kernel_owner.prepare(trajectory, step)

    def selected(self) -> tuple[Trajectory, int]:
        """The selected trajectory and step.

        Raises:
            ConfigError: None selected.
        """
        if self.trajectory is None or self.step is None:
            raise ConfigError("no state selected: call select() first")
        return self.trajectory, self.step

    def serve(self) -> StateReport:
        """Bring the kernel to the selected state and check it (see `report`).

        Raises:
            BackendUnavailableError: The backend is gone (nothing to recover here: the caller stops).
            InfrastructureError: The state could not be reached; `report` says ``route="failed"``.
        """
        trajectory, step = self.selected()
        self.answers = {}
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
        self.answers = {}
        faults = self.served_faults()
        return [*faults, f"{fault_text(error)} (recovered: kernel restarted and state restored)"]

    # -- disposable copies -------------------------------------------------------------------------------

    def copies(self) -> DisposableKernels:
        """The disposable kernels model-written code runs in: copies of a state, each discarded after one
        run, never the served kernel (started on first use).

        Raises:
            InfrastructureError: The provider is closed (a rollout's thread asked while its owner closed it).
        """
        with self._disposable_lock:
            if self._closed:
                raise InfrastructureError("the state provider is closed: no disposable kernels")
            if self.disposable is None:
                self.disposable = DisposableKernels(self.spec.with_access("copy"))
            return self.disposable

    # -- a lost backend ----------------------------------------------------------------------------------

    def lose_backend(self, error: BackendUnavailableError) -> None:
        """The backend was lost after a sample was scored: `raise_lost_backend` raises it next."""
        self._lost_backend = error

    def raise_lost_backend(self) -> None:
        """Raise the lost backend's error, once, if one was met (see `lose_backend`)."""
        if self._lost_backend is not None:
            error, self._lost_backend = self._lost_backend, None
            self.kernel_owner.position = None
            raise error

    # -- the dataset and closing ---------------------------------------------------------------------------

    def _check_dataset(self) -> None:
        """Once, at the first kernel: say in one line what would keep states from being checked or
        snapshots from loading (stale fingerprints; packages the snapshots' writer had and this kernel
        has not, or has at another version). Each snapshot is still tried and checked."""
        if self._dataset_checked:
            return
        self._dataset_checked = True
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
                self.spec.backend,
                self.dataset.path,
                ", ".join(differ),
                self.spec.backend,
            )

    def close(self) -> None:
        """Close the served kernel and the copies, give back this provider's share of the warm pool and of
        the shared templates. Idempotent."""
        self.kernel_owner.close()
        with self._disposable_lock:
            disposable, self.disposable, self._closed = self.disposable, None, True
        if disposable is not None:
            disposable.close()
        if self.pool is not None:
            self.pool.release()  # closed with the last provider that holds it
            self.pool = self.kernel_owner.pool = None
        if self._holds_templates:
            self._holds_templates = False
            release_shared_templates()

    def __enter__(self) -> StateProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
