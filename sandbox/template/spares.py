"""Spare kernels: kernels a template forks ahead of time, so that asking for one is a local operation.

`SpareKernels` is the part of `KernelTemplate` that keeps them. A template keeps ``spares`` ready (a state
template once a second copy of its state was asked for); a caller that knows what it will ask for next says
so: `SpareKernels.expecting` (a GRPO group's copies of one state, forked `FILLERS` at a time) or
`SpareKernels.prepare` (the state an env serves next). A spare is handed out connected, its first
``kernel_info`` answered and checked alive; a dead one is closed and the next tried. The spare that replaces
a handed-out one starts forking `REFILL_DELAY_S` later, so that the copy just handed out runs its first
request on cores it does not share with that start.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from themisto_env import tracing
from themisto_env.sandbox.kernel.process import release_thread_loop
from themisto_env.sandbox.lifetime import reaper as lifetime
from themisto_env.sandbox.models import SandboxLimits

if TYPE_CHECKING:
    from themisto_env.sandbox.kernel.core import Kernel
    from themisto_env.sandbox.kernel.spec import KernelSpec

__all__ = ["FILLERS", "REFILL_DELAY_S", "SpareKernels"]

#: How many spares a template forks at once in the background (the machine's cores, at most 2: more only queue).
FILLERS = max(1, min(2, os.cpu_count() or 1))
#: How long after a spare is handed out the next one starts forking: the copy's first request (a few
#: milliseconds) goes first, rather than beside the next spare's start on the same cores.
REFILL_DELAY_S = 0.05


class SpareKernels:
    """The spare kernels of a `KernelTemplate` (its base class: the attributes below are the template's)."""

    spec: KernelSpec
    limits: SandboxLimits
    spares: int
    refill_delay_s: float
    base: Any
    _lock: threading.RLock
    _ready: threading.Condition
    _spares: list[Kernel]
    _fillers: list[threading.Thread]
    _forking: int
    _waiting: int
    _expected: int
    _asked: int
    _keep_spares: bool
    _copies: int
    _forked: weakref.WeakSet[Kernel]
    _run_dir: Path | None
    _states: Any

    # -- kernels and spares -------------------------------------------------------------------------------------

    def _spare_or_fork(self, limits: SandboxLimits | None = None) -> Kernel:
        """A spare (see `KernelTemplate.kernel`), else a kernel forked now; spares forked again after."""
        if limits is None or limits == self.limits:
            spare = self._take_spare()
            if spare is not None:
                self._refill(delay_s=self.refill_delay_s)  # the copy's first request goes first
                return spare
        kernel = self._fork_kernel(limits)
        self._refill()  # after the fork: a state template's first spare follows its second copy
        return kernel

    def _take_spare(self) -> Kernel | None:
        """A live spare (a dead one is closed and the next tried), waiting for one being forked when more are
        under way than callers already wait for; None: fork one."""
        dead: list[Kernel] = []
        deadline = time.monotonic() + self.limits.start_timeout_s
        spare = None
        with self._lock:
            self._keep_spares = True
            self._asked += 1
            self._expected = max(0, self._expected - 1)
            while spare is None:
                while self._spares and spare is None:
                    candidate = self._spares.pop(0)  # the oldest: its start is furthest behind it
                    if candidate.is_alive():
                        spare = candidate
                    else:
                        dead.append(candidate)
                left = deadline - time.monotonic()
                if spare is not None or self._forking <= self._waiting or self._run_dir is None or left <= 0:
                    break
                self._waiting += 1
                try:
                    self._ready.wait(timeout=left)
                finally:
                    self._waiting -= 1
        for kernel in dead:
            kernel.close(graceful=False)
        return spare

    def _fork_kernel(self, limits: SandboxLimits | None = None) -> Kernel:
        from themisto_env.sandbox.kernel.core import Kernel

        kernel = Kernel(self.spec, limits=limits or self.limits, template=self)
        self._forked.add(kernel)
        self._copies += 1
        return kernel.start()

    @contextlib.contextmanager
    def expecting(self, n: int) -> Iterator[Self]:
        """Announce ``n`` kernels about to be asked for (a GRPO group's copies of one state): while the block
        runs, up to ``n`` spares are forked ahead in the background (`FILLERS` at a time), and a caller that
        finds none ready waits for one under way rather than forking its own. Spares left over beyond
        ``spares`` are closed when the block ends."""
        with self._lock:
            self._keep_spares = True
            self._expected += n
            asked = self._asked
        self._refill()
        try:
            yield self
        finally:
            surplus: list[Kernel] = []
            with self._lock:
                self._expected = max(0, self._expected - max(0, n - (self._asked - asked)))
                keep = max(self._expected, self.spares)
                while len(self._spares) > keep:
                    surplus.append(self._spares.pop())
            for kernel in surplus:
                kernel.close(graceful=False)

    def prepare(self) -> None:
        """Have a kernel ready for a caller about to ask for one (an env's next sample): a spare is forked now,
        in the background, and kept until asked for, whether or not this template keeps spares otherwise."""
        with self._lock:
            self._keep_spares = True
            self._expected = max(self._expected, 1)
        self._refill()

    def _target(self) -> int:
        """How many spares to keep ready now (under the lock): the copies announced ahead, else ``spares``
        (a state template's only once a second copy of it was asked for: a state used once needs none)."""
        if not self._keep_spares or self._run_dir is None:
            return 0
        usual = 0 if self.base is not None and self._copies < 2 else self.spares
        return max(usual, self._expected)

    def _refill(self, *, delay_s: float = 0.0) -> None:
        """Fork spare kernels in the background until `_target` are ready or under way (`FILLERS` threads),
        after ``delay_s`` unless copies were announced (`expecting`: they are asked for at once)."""
        with self._lock:
            self._fillers = [t for t in self._fillers if t.is_alive()]
            missing = self._target() - len(self._spares) - self._forking
            delay_s = 0.0 if self._expected else delay_s
            for _ in range(min(missing, FILLERS - len(self._fillers))):
                filler = threading.Thread(
                    target=self._fill, args=(delay_s,), name=lifetime.BACKGROUND_THREADS[0], daemon=True
                )
                self._fillers.append(filler)
                filler.start()

    def _fill(self, delay_s: float = 0.0) -> None:
        try:
            if delay_s:
                time.sleep(delay_s)
            with tracing.untraced():  # a spare belongs to no episode yet: no trace of its own
                self._fill_spares()
        finally:
            release_thread_loop()

    def _fill_spares(self) -> None:
        while True:
            with self._lock:
                if len(self._spares) + self._forking >= self._target():
                    return
                self._forking += 1
            kernel = None
            try:
                kernel = self._fork_kernel()
            except Exception:  # the template is gone or failing: the next kernel() says why, in its thread
                return
            finally:
                with self._lock:
                    self._forking -= 1
                    unwanted = kernel is not None and (self._run_dir is None or not self._keep_spares)
                    if kernel is not None and not unwanted:  # closed or trimmed meanwhile: not kept
                        self._spares.append(kernel)
                    self._ready.notify_all()
            if unwanted:
                kernel.close(graceful=False)
                return

    def trim(self) -> None:
        """Close the spare kernels and the state templates no open copy needs; keep the template itself (the
        next [`kernel`][themisto_env.sandbox.KernelTemplate.kernel] forks spares again)."""
        with self._lock:
            self._keep_spares = False
            self._expected = 0
            fillers = list(self._fillers)
            kept = [*self._states.values(), *self._retired]
        for state in kept:  # their spares first: one being forked would count as a copy in use
            state.trim()
        for filler in fillers:
            if filler is not threading.current_thread():
                filler.join(timeout=30)  # a spare being forked now is closed, not kept
        with self._lock:
            spares, self._spares = self._spares, []
            states = [state for state in [*self._states.values(), *self._retired] if not state.in_use()]
            for state in states:
                self._states.pop(str(state.digest), None)
            self._retired = [state for state in self._retired if state not in states]
        for kernel in spares:
            kernel.close(graceful=False)
        for state in states:
            state.close()
