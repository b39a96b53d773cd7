"""The kernel pool hands out started, warm, empty kernels once each; the store takes in only checked files."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from themisto_env.errors import (
    ConfigError,
    InfrastructureError,
    KernelDiedError,
    KernelStartError,
    SnapshotCorruptError,
    SnapshotError,
)
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.pool import KernelPool, shared_pool


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
            assert first.introspect.list_variables().total == 0, "preloading bound a user name"
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


class _CountedStarts:
    """Makes local kernels that count their own starts: how many are under way now, the most at once
    (seen by the kernels, not by the pool), the pids of the started ones; the first ``fail`` starts fail
    (``late``: after the kernel came up, as a kernel that starts and then fails a check)."""

    def __init__(
        self, snapshot_dir: Path, *, fail: int = 0, failure: type[Exception] = KernelStartError, late: bool = False
    ) -> None:
        self.snapshot_dir = snapshot_dir
        self.fail, self.failure, self.late = fail, failure, late
        self.lock = threading.Lock()
        self.now = self.most = self.calls = 0
        self.pids: list[int] = []

    def __call__(self) -> Kernel:
        counter = self

        class Counted(Kernel):
            def start(self) -> Counted:
                with counter.lock:
                    counter.calls += 1
                    failing = counter.calls <= counter.fail
                    counter.now += 1
                    counter.most = max(counter.most, counter.now)
                try:
                    if failing and not counter.late:
                        raise counter.failure("a start fails on purpose")
                    super().start()
                    if failing:
                        self.close(graceful=False)
                        raise counter.failure("a start fails on purpose")
                    pid = self.launcher.pid()
                    assert pid is not None
                    with counter.lock:
                        counter.pids.append(pid)
                    return self
                finally:
                    with counter.lock:
                        counter.now -= 1

        return Counted("local", snapshot_dir=self.snapshot_dir)


def _take_at_once(pool: KernelPool, takers: int) -> tuple[list[Kernel], list[BaseException]]:
    """``takers`` threads take a kernel each at the same moment: the kernels they got, the errors raised."""
    kernels: list[Kernel] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    go = threading.Barrier(takers)

    def take() -> None:
        go.wait()
        try:
            kernel = pool.take()
            with lock:
                kernels.append(kernel)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=take) for _ in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return kernels, errors


def test_takers_at_once_on_an_empty_pool_get_kernels_started_concurrently_up_to_the_limit(snapshot_dir: Path) -> None:
    counted = _CountedStarts(snapshot_dir)
    pool = KernelPool(counted, size=0, max_starting=2)
    try:
        kernels, errors = _take_at_once(pool, 4)
        assert not errors
        assert len({id(k) for k in kernels}) == 4 and all(k.is_alive() for k in kernels)
        assert counted.most == 2, f"{counted.most} kernels started at once with max_starting=2"
        assert counted.calls == 4, "a pool of size 0 started kernels nobody took"
        assert pool.ready == 0 and pool.starting == 0
    finally:
        pool.close()
        for kernel in kernels:
            kernel.close()


def test_a_shared_pool_serves_its_holders_first_kernels_concurrently(snapshot_dir: Path) -> None:
    """Envs of one kind share a pool of one warm kernel; taking their first kernels together, they do
    not wait for one start after another (the run with 8 connections)."""
    counted = _CountedStarts(snapshot_dir)
    key = ("test_pool", str(snapshot_dir))
    pools = [shared_pool(key, counted, size=1, max_starting=3) for _ in range(3)]
    assert all(p is pools[0] for p in pools)
    kernels, errors = _take_at_once(pools[0], 3)
    try:
        assert not errors and len({id(k) for k in kernels}) == 3
        assert counted.most == 3
    finally:
        for kernel in kernels:
            kernel.close()
        for pool in pools:
            pool.release()
    assert pools[0].closed
    assert not any(_running(pid) for pid in counted.pids), "the shared pool's spare kernel outlived it"


def test_close_during_concurrent_starts_leaves_no_kernel_process(snapshot_dir: Path) -> None:
    counted = _CountedStarts(snapshot_dir)
    pool = KernelPool(counted, size=3, max_starting=3)
    pool.fill()
    assert pool.starting == 3  # all three on their way at once
    pool.close()  # waits for the starting threads, which close what they started
    assert pool.starting == 0 and pool.ready == 0
    assert counted.pids, "no kernel started: the test saw nothing"
    left = [pid for pid in counted.pids if _running(pid)]
    assert not left, f"kernel processes {left} outlived the pool's close"
    pool.fill()  # a closed pool starts nothing more
    assert pool.starting == 0


def test_failed_starts_are_reported_to_concurrent_takers(snapshot_dir: Path) -> None:
    once = _CountedStarts(snapshot_dir, fail=1)
    pool = KernelPool(once, size=0, max_starting=2)
    try:
        kernels, errors = _take_at_once(pool, 3)  # one start fails: its taker has another started
        assert not errors and len({id(k) for k in kernels}) == 3
        assert once.calls == 4
    finally:
        pool.close()
        for kernel in kernels:
            kernel.close()

    both = _CountedStarts(snapshot_dir, fail=2, late=True)  # the two first starts, side by side, fail
    pool = KernelPool(both, size=0, max_starting=2)
    try:
        kernels, errors = _take_at_once(pool, 2)  # each taker meets one failure: each has another started
        assert not errors and len({id(k) for k in kernels}) == 2
        assert both.calls == 4
    finally:
        pool.close()
        for kernel in kernels:
            kernel.close()

    always = _CountedStarts(snapshot_dir, fail=1_000)
    pool = KernelPool(always, size=1, max_starting=2)
    kernels, errors = _take_at_once(pool, 3)
    pool.close()
    assert not kernels and len(errors) == 3
    assert all(isinstance(e, KernelStartError) and "fails on purpose" in str(e) for e in errors), errors
    assert always.calls <= 2 * 3 + 2, f"{always.calls} starts for 3 takers: the pool kept retrying"

    bug = _CountedStarts(snapshot_dir, fail=1_000, failure=ValueError)  # not the infrastructure's: no retry
    pool = KernelPool(bug, size=0, max_starting=1)
    with pytest.raises(ValueError, match="fails on purpose"):
        pool.take()
    pool.close()
    assert bug.calls == 1


def test_max_starting_below_one_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="max_starting must be at least 1"):
        KernelPool(lambda: Kernel("local"), max_starting=0)


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
            kernel._snapshots._take_in(written, digest)
        assert digest not in kernel.store and not list(kernel.store)
        written.parent.mkdir()
        secret = snapshot_dir.parent / "secret"
        secret.write_bytes(honest)
        written.symlink_to(secret)  # a link to a file the host can read and the kernel cannot
        with pytest.raises(SnapshotError):
            kernel._snapshots._take_in(written, digest)
        assert digest not in kernel.store and secret.exists()
        written.parent.mkdir()
        written.write_bytes(honest)
        kernel._snapshots._take_in(written, digest)
        assert kernel.store.path(digest).read_bytes() == honest
        assert not written.exists(), "the kernel's copy stays behind"
        with pytest.raises(SnapshotError):
            kernel._snapshots._take_in(snapshot_dir.parent / "elsewhere" / "x.dill", "0" * 64)
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
            kernel.snapshots.save()
        assert (victim / "keep.txt").exists()
