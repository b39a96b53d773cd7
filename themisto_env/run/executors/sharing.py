"""How the executors share the machine: CPU threads per kernel, model calls per worker."""

from __future__ import annotations

import os

from themisto_env.run.config import RunConfig

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def limit_threads(workers: int) -> None:
    """Share the CPUs between parallel workers: each worker's kernels get ``cpus // workers`` threads
    for OpenMP and BLAS (numpy, scikit-learn), unless the variables are already set. Without it, every
    kernel starts as many threads as there are CPUs and the workers slow each other down. Ray does the
    same for its actors."""
    threads = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, threads)


def in_flight(config: RunConfig, worker: int = 0) -> int:
    """Episodes the ``worker``-th process runs at once: its share of ``max_connections`` (the shares add up
    to it exactly), 1 without it."""
    if config.max_connections is None:
        return 1
    workers = min(config.workers, config.max_connections)
    return config.max_connections // workers + (worker < config.max_connections % workers)


def first_failure(exc: BaseException) -> BaseException:
    """The failure inside a task group's ExceptionGroup (a slot's error, as the serial executor raises it)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


__all__ = ["THREAD_VARIABLES", "first_failure", "in_flight", "limit_threads"]
