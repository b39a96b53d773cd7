"""The kernel pool hands out started, warm, empty kernels once each; the store takes in only checked files."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from themisto_env.errors import (
    InfrastructureError,
    KernelDiedError,
    KernelStartError,
    SnapshotCorruptError,
    SnapshotError,
)
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


def test_a_background_start_failure_is_retried_by_take_and_a_lasting_one_raised(snapshot_dir: Path) -> None:
    calls: list[str] = []

    def flaky() -> Kernel:
        calls.append("start")
        if len(calls) == 1:
            raise KernelStartError("not this time")
        return Kernel("local", snapshot_dir=snapshot_dir)

    pool = KernelPool(flaky, size=1)
    pool.fill()
    kernel = pool.take()  # the background start failed: take starts one itself
    try:
        assert kernel.is_alive() and calls[:2] == ["start", "start"]
    finally:
        kernel.close()
        pool.close()

    def broken() -> Kernel:
        raise KernelStartError("no kernel today")

    pool = KernelPool(broken, size=1)
    pool.fill()
    with pytest.raises(KernelStartError, match="no kernel today"):
        pool.take()
    pool.close()
    with pytest.raises(InfrastructureError, match="closed"):
        pool.take()


def test_a_child_of_a_kernel_that_exited_is_ended_with_it(snapshot_dir: Path, tmp_path: Path) -> None:
    """A cell that starts a child process and then ends its kernel with ``os._exit`` leaves nothing."""
    noted = tmp_path / "child.pid"
    kernel = Kernel("local", snapshot_dir=snapshot_dir).start()
    try:
        with pytest.raises(KernelDiedError):
            kernel.execute(
                "import subprocess, os\nchild = subprocess.Popen(['sleep', '300'])\n"
                f"open({str(noted)!r}, 'w').write(str(child.pid))\nos._exit(0)"
            )
    finally:
        kernel.close()
    child = int(noted.read_text())
    assert not _running(child), f"the kernel's child {child} outlived it"


def _running(pid: int) -> bool:
    """Whether a process runs (a zombie waiting for its parent does not count)."""
    for _ in range(20):  # the kill is asynchronous: give it a moment
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "Z":
            return False
        time.sleep(0.05)
    return True


def test_the_store_takes_in_only_a_file_that_hashes_to_its_name(snapshot_dir: Path) -> None:
    """A kernel writes snapshots into its run directory; the host moves one into the store only after
    checking its bytes, so a kernel cannot plant a file under another state's name, nor make the host
    read a link or a pipe, nor name a folder outside its outbox for the host to remove."""
    with Kernel("local", snapshot_dir=snapshot_dir) as kernel:
        outbox = kernel.run_dir / "snapshots-out"
        honest = b"a namespace"
        digest = hashlib.sha256(honest).hexdigest()
        written = outbox / digest[:2] / f"{digest}.dill"
        written.parent.mkdir()
        written.write_bytes(b"something else")
        with pytest.raises(SnapshotCorruptError):
            kernel._take_in(written, digest)
        assert digest not in kernel.store and not list(kernel.store)
        written.parent.mkdir()
        secret = snapshot_dir.parent / "secret"
        secret.write_bytes(honest)
        written.symlink_to(secret)  # a link to a file the host can read and the kernel cannot
        with pytest.raises(SnapshotError):
            kernel._take_in(written, digest)
        assert digest not in kernel.store and secret.exists()
        written.parent.mkdir()
        written.write_bytes(honest)
        kernel._take_in(written, digest)
        assert kernel.store.path(digest).read_bytes() == honest
        assert not written.exists(), "the kernel's copy stays behind"
        with pytest.raises(SnapshotError):
            kernel._take_in(snapshot_dir.parent / "elsewhere" / "x.dill", "0" * 64)
        assert secret.exists()


def test_a_snapshot_answer_that_names_a_path_is_refused(snapshot_dir: Path) -> None:
    """The digest in the kernel's answer becomes a host path: a forged one (a patched helper) must not
    lead the host to read or remove anything."""
    with Kernel("local", snapshot_dir=snapshot_dir) as kernel:
        victim = snapshot_dir.parent / "victim"
        victim.mkdir()
        (victim / "keep.txt").write_text("x")
        forged = f"{{'digest': {str(victim / 'x')!r}, 'size_bytes': 1, 'names': [], 'skipped': {{}}}}"
        kernel.execute(f"import sys\nsys.modules['_themisto_helper'].FUNCTIONS['snapshot'] = lambda store: {forged}")
        with pytest.raises(SnapshotError, match="malformed"):
            kernel.snapshot()
        assert (victim / "keep.txt").exists()
