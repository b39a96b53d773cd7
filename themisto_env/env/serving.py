"""Serving the live state of the env's current sample: the env's kernel brought to the state before the
sample's target step and checked (:class:`~themisto_env.replay.state.TrajectoryKernel`), the warm kernels it
comes from, recovery after a fault, the tools' view of that state, and the disposable kernels model-written
code runs in (never the env's kernel).

:class:`StateServing` is the part of :class:`~themisto_env.env.core.ThemistoEnv` that does this job (a base
class of it: the env's other parts read the same attributes).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from themisto_env.data.samples import Sample
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.config import MODEL_CODE_TIMEOUT_S, EnvConfig, warn_unisolated
from themisto_env.env.observation import history_items
from themisto_env.env.tools import ToolContext
from themisto_env.errors import BackendUnavailableError, ConfigError, InfrastructureError
from themisto_env.replay.dataset import Dataset
from themisto_env.replay.disposable import CodeRun, DisposableKernels, imported_modules
from themisto_env.replay.state import StateReport, TrajectoryKernel, expected_fingerprint, fresh_before
from themisto_env.sandbox.kernel import Kernel
from themisto_env.sandbox.kernel_helper import FINGERPRINT_VERSION
from themisto_env.sandbox.pool import KernelPool, shared_pool
from themisto_env.sandbox.ray_cluster import connect
from themisto_env.sandbox.ray_kernel import make_kernel
from themisto_env.sandbox.template import (
    FORKING_BACKENDS,
    KernelTemplate,
    hold_shared_templates,
    release_shared_templates,
    shared_template,
)

__all__ = ["StateServing", "not_served"]

log = logging.getLogger("themisto_env")


def not_served() -> dict[str, object]:
    """``info["state"]`` of a sample whose state is not served yet (nothing live was shown, nothing checked)."""
    return {"check": "not served", "faults": [], "differences": []}


class StateServing:
    """The live state of the current sample (a base of :class:`~themisto_env.env.core.ThemistoEnv`).

    :meth:`_init_serving` sets its attributes; the env sets the ones listed below as it moves from sample
    to sample.
    """

    # set by the env
    config: EnvConfig
    dataset: Dataset
    dataset_dir: Path
    environment: str | None
    trajectories: dict[str, Trajectory]
    _trajectory: Trajectory | None
    _sample: Sample | None

    def _init_serving(self) -> None:
        """The serving state of a new env: nothing started, nothing served (connected to Ray, when its
        kernels go there: here, in the caller's thread, not in a pool's)."""
        if self.config.ray is not None:
            connect(self.config.ray.address)
        self._preload = tuple(imported_modules(self.trajectories.values(), submodules=True))
        self._pool: KernelPool | None = None  # warm kernels for the env's own state, taken at reset
        self._state = TrajectoryKernel(self._new_kernel, template=self._template_source("read"))
        self._holds_templates = self.forking
        if self._holds_templates:  # the shared templates keep spares and states while an env forks from them
            hold_shared_templates()
        self._disposable: DisposableKernels | None = None  # kernels for model-written code, on first use
        self._dataset_checked = False
        self._report: StateReport | None = None  # how the current sample's state was served
        self._lost_backend: BackendUnavailableError | None = None  # raised at the next call
        self._sample_errors: list[str] = []  # infrastructure failures that touch the current sample

    @property
    def forking(self) -> bool:
        """Whether kernels and copies of states are forked from a template (``EnvConfig.fork``; local and
        bwrap kernels on this machine)."""
        return self.config.fork and self.config.ray is None and self.config.backend in FORKING_BACKENDS

    def _template_source(self, store_access: Literal["read", "copy"]) -> Callable[[], KernelTemplate] | None:
        """Gives the process's template for this env's kernels (shared with the other envs of this kind,
        replaced when it dies), or None where kernels are not forked.

        Kernels for model-written code (``store_access="copy"``) are forked on the local backend only: the
        copies of one bwrap template share its sandbox and its user, so one copy could reach another; on
        bwrap (and docker) each is started in a sandbox of its own, as before.
        """
        if not self.forking or (store_access == "copy" and self.config.backend != "local"):
            return None
        config = self.config
        return functools.partial(
            shared_template,
            config.backend,
            preload=self._preload,
            limits=config.limits,
            snapshot_dir=config.snapshot_dir,
            store_access=store_access,
            environment=self.environment,
        )

    def _warm_up(self) -> None:
        """Have a kernel on its way before the first state is needed (when states are served at all)."""
        if self.forking:
            return  # the template is started with the first kernel (shared by the process's envs)
        if self.config.warm_kernels and (self.config.observation != "static" or not self.config.lazy_state):
            if self._pool is None:
                self._pool = self._state.pool = self._shared_pool()
            self._pool.fill()

    def _close_serving(self) -> None:
        """Close the env's kernel, give back its share of the warm pool, close the disposable kernels."""
        self._state.close()
        if self._pool is not None:
            self._pool.release()  # closed with the last env that holds it
            self._pool = self._state.pool = None
        if self._disposable is not None:
            self._disposable.close()
            self._disposable = None
        if self._holds_templates:
            self._holds_templates = False
            release_shared_templates()

    @property
    def code_timeout_s(self) -> float:
        """The time limit of model-written code (a prediction, a tried cell)."""
        return min(self.config.limits.timeout_s, MODEL_CODE_TIMEOUT_S)

    def disposable_kernels(self) -> DisposableKernels:
        """The kernels model-written code runs in (a pool of disposable kernels, started on first use,
        preloading the libraries the dataset's cells import)."""
        if self._disposable is None:
            self._disposable = DisposableKernels(
                self.config.backend,
                limits=self.config.limits,
                snapshot_dir=self.config.snapshot_dir,
                environment=self.environment,
                preload=imported_modules(self.trajectories.values()),
                ray=self.config.ray,
                template=self._template_source("copy"),
            )
        return self._disposable

    def tool_context(self) -> ToolContext:
        """The tools' view of the current state (for langchain tools bound to this env)."""
        if self._trajectory is None or self._sample is None:
            raise ConfigError("call reset() before using tools")
        self._ensure_served()
        sizes, memory = self._recorded_figures()
        trajectory, step = self._trajectory, self._sample.step

        def try_code(code: str) -> CodeRun:  # the try_cell tool: a disposable kernel, never this env's
            warn_unisolated(self.config.backend, "the try_cell tool")
            return self.disposable_kernels().run(trajectory, step, code, timeout_s=self.code_timeout_s)

        return ToolContext(
            kernel=self._state.kernel,
            history=history_items(self._executed_steps()),
            recorded_sizes=sizes,
            recorded_memory=memory,
            try_code=try_code if self.config.task == "next-cell" else None,
            recorded_fingerprint=expected_fingerprint(trajectory, step),
        )

    @property
    def state_report(self) -> StateReport | None:
        """How the current sample's state was served and checked (None while it is not served yet)."""
        return self._report

    def serve_state(self) -> StateReport:
        """Bring the kernel to the current sample's state now, if it is not there yet, and say how it was
        served and checked (the env does this on its own when a tool or the ``full`` mode needs it)."""
        if self._sample is None:
            raise ConfigError("call reset() before serve_state()")
        self._ensure_served()
        assert self._report is not None
        return self._report

    def _ensure_served(self) -> None:
        if self._report is None:
            self._serve()

    def _raise_lost_backend(self) -> None:
        if self._lost_backend is not None:
            error, self._lost_backend = self._lost_backend, None
            self._state.position = None
            raise error

    def _recorded_figures(self) -> tuple[dict[str, int], int | None]:
        """Per-variable sizes and kernel memory recorded at build time for the current sample's state
        (what tools and ``full`` mode show, so that answers do not depend on how the state was reached)."""
        assert self._trajectory is not None and self._sample is not None
        step = self._sample.step
        if fresh_before(self._trajectory, step):
            return {}, None  # a fresh namespace: nothing recorded applies
        before = self._trajectory.steps[step - 1]
        return before.variables, before.memory_bytes

    def _shared_pool(self) -> KernelPool:
        """The process's pool of warm kernels for this env's kind of kernel (backend, limits, snapshot
        store, preloaded modules), shared with the other open envs of that kind."""
        config = self.config
        key = (config.backend, config.limits.model_dump_json(), config.snapshot_dir, self._preload, config.warm_kernels)
        key += (self.environment, config.ray.model_dump_json() if config.ray else None)
        # the factory, not a bound method: the process's pool must not hold this env
        return shared_pool(key, self._kernel_factory(), size=config.warm_kernels, preload=self._preload)

    def _kernel_factory(self) -> functools.partial[Kernel]:
        """Makes a new kernel of this env's kind: on this machine, or in a Ray actor (``config.ray``)."""
        config = self.config
        return functools.partial(
            make_kernel,
            config.backend,
            ray=config.ray,
            limits=config.limits,
            snapshot_dir=config.snapshot_dir,
            environment=self.environment,
        )

    def _new_kernel(self) -> Kernel:
        """A new kernel for the env's own state."""
        return self._kernel_factory()()

    def _executed_steps(self) -> list[Any]:
        """The steps executed before the current sample (the position follows from the sample)."""
        assert self._trajectory is not None and self._sample is not None
        return self._trajectory.steps[: self._sample.step]

    def _check_dataset(self) -> None:
        """Once, at the first kernel: say in one line what would keep states from being checked or
        snapshots from loading (stale fingerprints; packages the snapshots' writer had and this kernel
        has not, or has at another version). Each snapshot is still tried and checked: one that does not
        load, or loads into another state, is passed over for replay."""
        if self._dataset_checked:
            return
        self._dataset_checked = True
        stale = sorted(t.id for t in self.trajectories.values() if t.fingerprint_version != FINGERPRINT_VERSION)
        if stale:
            log.warning(
                "%d trajectories of %s carry no current state fingerprints (%s): their served states are not "
                "checked; rebuild the dataset with `themisto data build` to check them.",
                len(stale),
                self.dataset_dir,
                ", ".join(stale[:3]) + (", ..." if len(stale) > 3 else ""),
            )
        manifest = self.dataset.manifest
        if not manifest.snapshots or not manifest.packages:
            return
        live = self._state.kernel.package_versions(sorted(manifest.packages))
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
                self.dataset_dir,
                ", ".join(differ),
                self.config.backend,
            )

    def _serve(self) -> None:
        """Bring the kernel to the current sample's state and check it; record what happened."""
        assert self._trajectory is not None and self._sample is not None
        try:
            self._check_dataset()
            self._report = self._state.serve(self._trajectory, self._sample.step)
        except BackendUnavailableError:
            raise  # the engine is gone: stop (in one line) rather than flag every sample after this one
        except InfrastructureError as exc:
            self._report = StateReport(self._trajectory.id, self._sample.step, route="failed")
            self._sample_errors.append(f"{type(exc).__name__}: {exc}")

    def _recover(self, error: InfrastructureError) -> str:
        """Bring a failed kernel back to the current sample's state; describe what happened."""
        self._state.taint()
        self._serve()
        return f"{type(error).__name__}: {error} (recovered: kernel restarted and state restored)"
