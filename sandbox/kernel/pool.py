"""Started kernels kept ready in the background, each handed out once.

A `KernelPool` pays a kernel's start (the process or container, and the notebook's imports) ahead of time
on background threads, so that whoever needs a fresh kernel takes one already up::

    with KernelPool(lambda: Kernel("docker"), size=1, preload=("pandas", "numpy")) as pool:
        kernel = pool.take()      # started, pandas and numpy imported; yours to use and close

A kernel is handed out once and never comes back. Several owners of the same kind of kernel share one pool
through `shared_pool`, which counts its holders; the last `KernelPool.release` closes it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable, Hashable, Sequence
from types import TracebackType

from themisto_env.errors import ConfigError, InfrastructureError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.kernel.process import release_thread_loop


class KernelPool:
    """Keeps ``size`` started kernels ready, and starts kernels for the takers waiting, several at once.

    Args:
        new_kernel: Makes a new, unstarted kernel.
        size: How many ready kernels to keep (0: none ahead of time; `take` has one started).
        preload: Modules each kernel imports once started (missing ones are skipped).
        max_starting: Kernels starting at once, at most (None: the CPU count). Eight envs sharing the pool
            that take their first kernel together get them from concurrent starts, not one after another.
    """

    def __init__(
        self,
        new_kernel: Callable[[], KernelLike],
        *,
        size: int = 1,
        preload: Sequence[str] = (),
        max_starting: int | None = None,
    ) -> None:
        if max_starting is not None and max_starting < 1:
            raise ConfigError(f"max_starting must be at least 1 (kernels starting at once), not {max_starting}")
        self._new_kernel = new_kernel
        self.size = size
        self.preload = tuple(preload)
        self.max_starting = max_starting or os.cpu_count() or 1
        self._ready: list[KernelLike] = []
        # failed starts not reported yet, one per start: none is lost to another, and none retried unreported
        self._failures: collections.deque[BaseException] = collections.deque()
        self._lock = threading.Condition()
        self._starting = 0
        self._waiting = 0  # takers waiting for a kernel: each one more wanted, beyond size
        self._unretried = 0  # of them, those that met no failed start yet
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._holders = 1
        self._key: Hashable | None = None  # set for a pool handed out by shared_pool()

    def take(self) -> KernelLike:
        """A started kernel, now the caller's (to close). Refills the pool in the background.

        A taker that finds no kernel ready has one more started (up to ``max_starting`` at once) and
        takes the first that is ready. Each start that failed is reported to one taker (first to those
        that met none yet): the first it meets has another started (starts may fail once and work the
        next time), the second is raised, as is at once a failure that is not an
        [`InfrastructureError`][themisto_env.errors.InfrastructureError].

        Raises:
            BackendUnavailableError: The backend cannot run here.
            KernelStartError: The kernel did not start.
            InfrastructureError: The pool is closed.
        """
        retried = False
        with self._lock:
            self._waiting += 1
            self._unretried += 1
            try:
                while True:
                    if self._closed:
                        raise InfrastructureError("the kernel pool is closed")
                    if self._ready:
                        kernel = self._ready.pop(0)
                        break
                    if self._failures and (not retried or not self._unretried):  # first to those not retried
                        failure = self._failures.popleft()
                        if retried or not isinstance(failure, InfrastructureError):
                            raise failure
                        retried = True  # another start, once every failure is reported: it may work
                        self._unretried -= 1
                        continue
                    self._start_wanted()
                    self._lock.wait(timeout=1.0)
            finally:
                self._waiting -= 1
                self._unretried -= not retried
        self.fill()
        return kernel

    def fill(self) -> None:
        """Start kernels in the background until ``size`` are ready or on their way (none while a failed
        start waits to be reported by `take`)."""
        with self._lock:
            self._start_wanted()

    @property
    def starting(self) -> int:
        """How many kernels are starting now (never more than ``max_starting``)."""
        with self._lock:
            return self._starting

    def _start_wanted(self) -> None:
        """Under the lock: start kernels in the background for the waiting takers and ``size`` ready ones,
        as many at once as ``max_starting`` allows; none while a failed start waits to be reported (so a
        backend that cannot start kernels is not tried again and again in the background)."""
        if self._closed or self._failures:
            return
        wanted = self._waiting + self.size - len(self._ready) - self._starting
        missing = max(0, min(wanted, self.max_starting - self._starting))
        self._starting += missing
        started = [
            threading.Thread(target=self._start_in_background, name="themisto-kernel-pool", daemon=True)
            for _ in range(missing)
        ]
        self._threads = [t for t in self._threads if t.is_alive()] + started
        for thread in started:  # under the lock: close() sees every thread it must wait for
            thread.start()

    def _start(self) -> KernelLike:
        """A started kernel with the modules preloaded; without them if preloading kills it (an import
        too heavy for the limits): a kernel that works beats a warm one that does not."""
        kernel = self._new_kernel().start()
        try:
            kernel.introspect.preload(self.preload)
        except InfrastructureError:
            kernel.close(graceful=False)
            kernel = self._new_kernel().start()
        except BaseException:
            kernel.close(graceful=False)
            raise
        return kernel

    def _start_in_background(self) -> None:
        kernel: KernelLike | None = None
        failure: BaseException | None = None
        try:
            kernel = self._start()
        except BaseException as exc:  # reported by the next take()
            failure = exc
        finally:
            with self._lock:
                self._starting -= 1
                if not self._closed and kernel is not None:
                    self._ready.append(kernel)
                    kernel = None
                    self._failures.clear()  # a start worked: earlier failures say nothing of the next one
                elif failure is not None:
                    self._failures.append(failure)
                self._lock.notify_all()
            if kernel is not None:  # the pool closed meanwhile
                kernel.close(graceful=False)
            release_thread_loop()  # jupyter_client's loop for this thread: closed now, not at collection

    def close(self) -> None:
        """Close the ready kernels and wait for those still starting (closed by their thread). Idempotent."""
        with self._lock:
            self._closed = True
            ready, self._ready = self._ready, []
            threads = list(self._threads)
            self._lock.notify_all()
        for kernel in ready:
            with contextlib.suppress(Exception):
                kernel.close(graceful=False)
        for thread in threads:
            thread.join(timeout=120)

    @property
    def ready(self) -> int:
        """How many started kernels are waiting to be taken."""
        with self._lock:
            return len(self._ready)

    @property
    def closed(self) -> bool:
        """Whether `close` ran (a closed pool hands out no kernel)."""
        return self._closed

    def release(self) -> None:
        """One holder is done with the pool; the last one's release closes it. Idempotent per holder
        only in the sense that extra releases after the close do nothing."""
        with _SHARED_LOCK:
            self._holders -= 1
            last = self._holders <= 0
            if last and self._key is not None and _SHARED.get(self._key) is self:
                del _SHARED[self._key]
        if last:
            self.close()

    def __enter__(self) -> KernelPool:
        self.fill()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_SHARED: dict[Hashable, KernelPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(
    key: Hashable,
    new_kernel: Callable[[], KernelLike],
    *,
    size: int = 1,
    preload: Sequence[str] = (),
    max_starting: int | None = None,
) -> KernelPool:
    """The process's pool for ``key`` (made on first use), with one more holder: call
    `KernelPool.release` once when done. ``new_kernel``, ``size``, ``preload`` and ``max_starting``
    apply when the pool is made; holders of one key must want the same kernels."""
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is not None and not pool.closed:
            pool._holders += 1
            return pool
        pool = KernelPool(new_kernel, size=size, preload=preload, max_starting=max_starting)
        pool._key = key
        _SHARED[key] = pool
        return pool
