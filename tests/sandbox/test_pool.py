"""The kernel pool hands out started, warm, empty kernels once each; the store takes in only checked files."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from themisto_env.errors import KernelStartError, SnapshotCorruptError
from themisto_env.sandbox.kernel import Kernel
from themisto_env.sandbox.pool import KernelPool


def test_a_pooled_kernel_is_started_warm_and_empty(snapshot_dir: Path) -> None:
    made: list[Kernel] = []

    def new() -> Kernel:
        made.append(Kernel("local", snapshot_dir=snapshot_dir))
        return made[-1]

    with KernelPool(new, size=1, preload=("json", "no_such_module_here")) as pool:
        first = pool.take()
        try:
            assert first.is_alive()
            assert first.execute("import sys\n'json' in sys.modules").outputs[0]["data"]["text/plain"] == "True"
            first.execute("del sys")
            assert first.list_variables().total == 0, "preloading bound a user name"
            second = pool.take()  # the refill, started in the background
            assert second is not first and second.is_alive()
            second.close()
        finally:
            first.close()
        assert len(made) >= 2
    assert not any(k.is_alive() for k in made), "the pool left a kernel running"


def test_a_kernel_is_handed_out_once_even_to_concurrent_takers(snapshot_dir: Path) -> None:
    taken: list[Kernel] = []
    lock = threading.Lock()
    with KernelPool(lambda: Kernel("local", snapshot_dir=snapshot_dir), size=2) as pool:

        def take() -> None:
            kernel = pool.take()
            with lock:
                taken.append(kernel)

        threads = [threading.Thread(target=take) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    try:
        assert len({id(k) for k in taken}) == 3
    finally:
        for kernel in taken:
            kernel.close()


def test_a_kernel_that_cannot_start_is_reported_by_take(snapshot_dir: Path) -> None:
    def broken() -> Kernel:
        raise KernelStartError("no kernel today")

    pool = KernelPool(broken, size=1)
    pool.fill()
    with pytest.raises(KernelStartError, match="no kernel today"):
        pool.take()
    pool.close()
    with pytest.raises(Exception, match="closed"):
        pool.take()


def test_the_store_takes_in_only_a_file_that_hashes_to_its_name(tmp_path: Path) -> None:
    """A kernel writes snapshots into its run directory; the host moves one into the store only after
    checking its bytes, so a kernel cannot plant a file under another state's name."""
    kernel = Kernel("local", snapshot_dir=tmp_path / "store")
    honest = b"a namespace"
    digest = hashlib.sha256(honest).hexdigest()
    written = tmp_path / "out" / digest[:2] / f"{digest}.dill"
    written.parent.mkdir(parents=True)
    written.write_bytes(b"something else")
    with pytest.raises(SnapshotCorruptError):
        kernel._take_in(written, digest)
    assert digest not in kernel.store and not list(kernel.store)
    written.parent.mkdir(parents=True)
    written.write_bytes(honest)
    kernel._take_in(written, digest)
    assert kernel.store.path(digest).read_bytes() == honest
    assert not written.exists(), "the kernel's copy stays behind"
