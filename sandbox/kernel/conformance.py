"""The conformance suite: one set of checks that every kind of kernel must pass, whatever makes it.

The suite takes a `KernelKind`: a factory (a callable that returns a started or startable
`KernelLike` for some limits and a store access) and what the kind claims (isolation, enforced limits).
`themisto_env.sandbox.kinds` makes every kind there is: a kernel started on the ``local``, ``bwrap`` or
``docker`` backend, or one forked from a kernel template. ``themisto sandbox check`` runs
the suite on a user's machine and the tests run it on every kind (tests/sandbox/test_conformance.py). Each
check starts its own kernel(s) and raises ``AssertionError`` (or a ``ThemistoError``) when the kind
misbehaves; what it reads of a kernel is the contract (`themisto_env.sandbox.kernel.contract`), but for the
isolation checks, which also read a local kernel's ``run_dir`` and launcher paths.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from themisto_env.errors import (
    HelperError,
    InfrastructureError,
    IntrospectionRefused,
    KernelDiedError,
    SnapshotError,
    UnknownNameError,
)
from themisto_env.sandbox.kernel.answers import ANSWERS
from themisto_env.sandbox.kernel.contract import (
    IntrospectionLike,
    KernelLike,
    LauncherReadings,
    SnapshotsLike,
    broken_members,
)
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.store.workdir import FileStore, scan

__all__ = ["CHECKS", "Check", "CheckResult", "KernelFactory", "KernelKind", "checks_for", "run_check"]

StoreAccess = Literal["read", "copy"]
#: Makes a kernel (started or not: the suite starts it) with these limits and this store access; a kind that
#: makes copy-mode kernels only (docker copies) may give one where ``read`` is asked.
KernelFactory = Callable[[SandboxLimits, StoreAccess], KernelLike]


@dataclass(frozen=True)
class KernelKind:
    """A kind of kernel the suite runs on (see `themisto_env.sandbox.kinds`).

    Args:
        name: What the kind is called (``local``, ``docker-forked``, ...).
        make: Makes one kernel of the kind.
        isolated: Whether its kernels claim isolation from the host (the isolation checks run).
        enforces_limits: Whether its kernels claim enforced memory and process limits (the limit checks run).
    """

    name: str
    make: KernelFactory
    isolated: bool = False
    enforces_limits: bool = False


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one conformance check."""

    name: str
    passed: bool
    detail: str
    seconds: float


@dataclass(frozen=True)
class Check:
    """A named check; ``isolation``/``limits`` checks run only on kinds that claim them."""

    name: str
    description: str
    run: Callable[[Kernels], str]
    isolation: bool = False
    limits: bool = False


class Kernels:
    """Starts kernels of one kind for the checks, with optional limit overrides, and closes them."""

    def __init__(self, kind: KernelKind) -> None:
        self.kind = kind

    @contextmanager
    def __call__(self, store_access: StoreAccess = "read", **limits: Any) -> Iterator[KernelLike]:
        kernel = self.kind.make(SandboxLimits(**limits), store_access)
        try:
            yield kernel.start()
        finally:
            kernel.close()


def _check_start(new: Kernels) -> str:
    started = time.perf_counter()
    with new() as k:
        ready = time.perf_counter() - started
        result = k.execute("1 + 1")
        assert result.status == "ok", result
        assert result.outputs == [
            {
                "output_type": "execute_result",
                "data": {"text/plain": "2"},
                "metadata": {},
                "execution_count": 1,
            }
        ], result.outputs
        assert result.memory_bytes and result.memory_bytes > 10_000_000, result.memory_bytes
    return f"ready in {ready:.2f} s"


def _check_outputs(new: Kernels) -> str:
    code = (
        "import sys\nfrom IPython.display import display, HTML\n"
        "print('out'); print('err', file=sys.stderr); print('more')\n"
        "display(HTML('<b>bold</b>'))\n"
        "import matplotlib; matplotlib.use('module://matplotlib_inline.backend_inline')\n"
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()\n"
        "{'answer': 42}"
    )
    with new() as k:
        outputs = k.execute(code).outputs
        kinds = [(o["output_type"], o.get("name")) for o in outputs]
        assert ("stream", "stdout") in kinds and ("stream", "stderr") in kinds, kinds
        stdout = next(o for o in outputs if o.get("name") == "stdout")
        assert stdout["text"] == "out\nmore\n", stdout
        displays = [o for o in outputs if o["output_type"] == "display_data"]
        assert any("text/html" in d["data"] and "text/plain" in d["data"] for d in displays), displays
        assert any("image/png" in d["data"] for d in displays), "no image/png display from matplotlib"
        assert outputs[-1]["output_type"] == "execute_result", outputs[-1]
        assert outputs[-1]["data"]["text/plain"] == "{'answer': 42}"
        error = k.execute("def f():\n    return 1 / 0\nf()")
        assert error.status == "error" and error.error is not None
        assert error.error["ename"] == "ZeroDivisionError" and len(error.error["traceback"]) >= 2
    return "stream, display_data (html, png), execute_result, error"


def _check_timeout_interrupt(new: Kernels) -> str:
    with new(timeout_s=1.0) as k:
        k.execute("kept = 'still here'")
        result = k.execute("import time\nwhile True:\n    time.sleep(0.01)")
        assert result.status == "timeout" and not result.kernel_restarted, result
        assert result.error is not None and result.error["ename"] == "KeyboardInterrupt"
        after = k.execute("kept")
        assert after.outputs[0]["data"]["text/plain"] == "'still here'", after
    return "interrupted after 1 s, state kept"


def _check_timeout_restart(new: Kernels) -> str:
    with new(timeout_s=1.0, interrupt_grace_s=1.0) as k:
        result = k.execute("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")
        assert result.status == "timeout" and result.kernel_restarted, result
        assert k.execute("21 * 2").outputs[0]["data"]["text/plain"] == "42"
    return "a cell that ignores SIGINT gets the kernel restarted"


def _check_output_cap(new: Kernels) -> str:
    with new(output_limit_bytes=10_000) as k:
        result = k.execute("for i in range(100_000):\n    print(i)")
        assert result.truncated, result
        text = "".join(o.get("text", "") for o in result.outputs)
        assert "output truncated" in text and len(text) < 11_000, len(text)
    return "output capped at 10,000 bytes with a marker"


def _check_death(new: Kernels) -> str:
    with new() as k:
        started = time.perf_counter()
        try:
            k.execute("import os\nos._exit(3)")
        except KernelDiedError:
            waited = time.perf_counter() - started
        else:
            raise AssertionError("os._exit did not raise KernelDiedError")
        assert waited < 5, waited
        k.restart()
        assert k.execute("1").status == "ok"
    return f"death detected in {waited:.2f} s, restart works"


def _check_snapshot(new: Kernels) -> str:
    build = (
        "import pandas as pd, numpy as np\n"
        "df = pd.DataFrame({'a': np.arange(1000), 'b': np.arange(1000) * 0.5})\n"
        "def double(v):\n    return 2 * v\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n"
        "box = Box(double(21))\n"
        "gen = (i for i in range(3))\n"
        "fh = open('notes.txt', 'w+'); fh.write('hello world'); fh.flush(); fh.seek(6)\n"
    )
    with new() as k:
        assert k.execute(build).status == "ok"
        info = k.snapshots.save()
        assert "gen" in info.skipped and "df" in info.names and "fh" in info.names, info
        written = {name: value for name, value in k.introspect.fingerprint().items() if name not in info.skipped}
        assert k.store.path(info.digest).exists()
        again = k.snapshots.save()
        assert again.digest == info.digest, "the same state must give the same digest"
        k.execute("df = None; extra = 1")
        k.snapshots.restore(info)
        same = k.execute("(df['b'].sum(), box.v, 'extra' in dir())").outputs[0]["data"]["text/plain"]
        assert same == "(np.float64(249750.0), 42, False)" or same == "(249750.0, 42, False)", same
        with new() as fresh:
            loaded = fresh.snapshots.restore(info)
            assert loaded.fingerprint == fresh.introspect.fingerprint() == written, (loaded.fingerprint, written)
            check = "(int(df['a'].sum()), double(4), box.v, fh.read())"
            restored = fresh.execute(check).outputs[0]["data"]["text/plain"]
            assert restored == "(499500, 8, 42, 'world')", restored
    return f"{info.size_bytes:,} bytes, generator skipped, restored in same and fresh kernel (same fingerprint)"


def _check_readonly_introspection(new: Kernels) -> str:
    with new() as k:
        k.execute("import pandas as pd\nframe = pd.DataFrame({'x': [1, 2]})\nfn = lambda v: v\nframe")
        before = k.introspect.namespace_state()
        asked = 0
        for call in ANSWERS:  # every typed question, of no name and of each name (arguments it lacks: refused)
            for args in ({}, {"name": "frame"}, {"name": "fn"}, {"name": "nope"}):
                with suppress(HelperError):
                    k.introspect.ask(call, **args)
                    asked += 1
        k.introspect.dataframe("frame", "describe")
        k.introspect.variable_sizes()
        k.snapshots.save()
        after = k.introspect.namespace_state()
        assert before == after, (before, after)
    return f"namespace, _, Out, counter and history unchanged by {asked} answers of {len(ANSWERS)} calls"


def _check_helper_errors(new: Kernels) -> str:
    """The helper failing on the user's objects, or declining, is a HelperError: the kernel stays as it was."""
    build = (
        "import pandas as pd\n"
        "class Loud:\n    def __repr__(self):\n        raise RuntimeError('no repr for you')\n"
        "class Endless(list):\n    def __len__(self):\n        raise RuntimeError('no len for you')\n"
        "class Sulky(pd.DataFrame):\n    def describe(self, *args, **kwargs):\n"
        "        raise RuntimeError('no stats for you')\n"
        "class Lookup:\n    def __getattr__(self, key):\n        raise KeyError(key)\n"
        "loud, endless, sulky, lookup = Loud(), Endless([1, 2]), Sulky({'x': [1, 2]}), Lookup()\n"
        "frame = pd.DataFrame({'x': [1, 2]})"
    )
    with new() as k:
        assert k.execute(build).status == "ok"
        pid, before = k.launcher.pid(), k.introspect.namespace_state()
        failures = (
            (lambda: k.introspect.inspect_variable("endless"), "no len for you"),
            (lambda: k.introspect.dataframe("sulky", "describe"), "no stats for you"),
        )
        for ask, detail in failures:
            try:
                ask()
            except InfrastructureError as exc:
                raise AssertionError(f"a failure on the user's data is not an infrastructure error: {exc!r}") from exc
            except HelperError as exc:
                assert not isinstance(exc, IntrospectionRefused) and detail in exc.detail, repr(exc)
            else:
                raise AssertionError(f"no HelperError ({detail})")
        assert k.introspect.inspect_variable("loud").repr.startswith("<repr failed: RuntimeError: no repr for you")
        assert k.introspect.inspect_variable("lookup").shape is None, "a __getattr__ that raises is no failure"
        listed = {row.name for row in k.introspect.list_variables().variables}
        assert {"loud", "endless", "sulky", "lookup", "frame"} <= listed, listed
        try:
            k.introspect.inspect_variable("fram")
        except UnknownNameError as exc:
            assert "Did you mean frame" in str(exc) and exc.suggestions[0] == "frame", repr(exc)
        else:
            raise AssertionError("an unknown name was answered")
        try:
            k.introspect.dataframe("loud")
        except IntrospectionRefused as exc:
            assert not isinstance(exc, UnknownNameError) and "not a pandas DataFrame" in str(exc), repr(exc)
        else:
            raise AssertionError("a DataFrame view of a non-frame was answered")
        assert k.is_alive() and k.restarts == 0 and k.launcher.pid() == pid, "the kernel was restarted"
        assert k.introspect.namespace_state() == before, "the namespace changed"
        assert k.execute("len(frame)").outputs[0]["data"]["text/plain"] == "2"
    return "HelperError, the same kernel process, the namespace intact; unknown names with the nearest"


def _check_no_network(new: Kernels) -> str:
    with new() as k:
        result = k.execute("import socket\nsorted(name for _, name in socket.if_nameindex())")
        interfaces = result.outputs[0]["data"]["text/plain"]
        assert interfaces == "['lo']", f"network interfaces inside the sandbox: {interfaces}"
    return "only the loopback interface"


def _check_readonly_root(new: Kernels) -> str:
    with new() as k:
        code = (
            "import os, tempfile\n"
            "try:\n    open('/usr/themisto-probe', 'w'); root = 'writable'\n"
            "except OSError as e:\n    root = type(e).__name__\n"
            "with tempfile.NamedTemporaryFile(dir='/tmp') as f:\n    f.write(b'x')\n"
            "(root, os.getuid())"
        )
        text = k.execute(code).outputs[0]["data"]["text/plain"]
        root, uid = eval(text)  # a tuple literal of str and int, produced just above
        assert root != "writable", "the root file system is writable"
        assert uid != 0, "the kernel runs as root"
    return f"root read-only ({root}), /tmp writable, uid {uid}"


def _check_store_protected(new: Kernels) -> str:
    probe = (
        "import os\n"
        "def attempt(folder):\n"
        "    try:\n"
        "        open(os.path.join(folder, 'themisto-probe'), 'w').close(); return 'writable'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
    )
    with new() as k:
        k.execute("x = 1")
        digest = k.snapshots.save().digest
        store = k.launcher.kernel_path(k.store.root)
        k.execute(probe)
        listed = f"sorted(os.listdir({store!r}))[:3] if os.path.isdir({store!r}) else 'hidden'"  # hidden: copies
        outcome = k.execute(f"attempt({store!r}), {listed}").outputs[0]["data"]["text/plain"]
        assert "writable" not in outcome, f"the kernel can write the snapshot store: {outcome}"
        assert not (k.store.root / "themisto-probe").exists()
    with new(store_access="copy") as k:
        k.snapshots.restore(digest)  # handed in by copy, removed once loaded
        k.execute(probe)
        seen = k.execute(f"os.path.exists({store!r}), sorted(os.listdir({str(k.run_dir)!r}))").outputs[0]
        text = seen["data"]["text/plain"]
        assert text.startswith("(False"), f"a copy-mode kernel sees the snapshot store: {text}"
        assert digest not in text, f"the handed-in snapshot was left in the run directory: {text}"
    return f"store read-only ({outcome.split(',')[0].strip('(')}); invisible in copy mode"


def _check_workdir(new: Kernels) -> str:
    with tempfile.TemporaryDirectory() as tmp, new() as k:
        source = Path(tmp) / "notebook"
        (source / "data").mkdir(parents=True)
        (source / "data" / "x.csv").write_text("a,b\n1,2\n")
        tree = scan(source, limit_bytes=2**20)
        store = FileStore(Path(tmp) / "files")
        store.add(source, tree)
        k.snapshots.set_files(tree, store)
        code = (
            "import os\nrows = open('data/x.csv').read().split()\n"
            "open('written.txt', 'w').write('new')\nos.remove('data/x.csv')\n"
            "(rows, os.getcwd() == os.environ['PWD'])"
        )
        result = k.execute(code)
        assert result.status == "ok", result.outputs
        assert result.outputs[-1]["data"]["text/plain"] == "(['a,b', '1,2'], True)", result.outputs
        assert sorted(k.snapshots.files()) == ["written.txt"], k.snapshots.files()
        assert scan(source, limit_bytes=2**20) == tree, "the kernel changed the original folder"
        k.snapshots.set_files(tree, store)
        assert k.snapshots.files() == tree and k.execute("open('data/x.csv').read()").status == "ok"
    return "reads relative files; writes stay in the copy; the copy is reset to a recorded tree"


def _check_memory_limit(new: Kernels) -> str:
    with new(memory_mb=256) as k:
        try:
            result = k.execute("blob = bytearray(512 * 1024 * 1024)\nblob[::4096] = b'x' * len(blob[::4096])")
        except KernelDiedError as exc:
            return f"over-limit allocation killed the kernel: {exc}"
        if result.error is not None and result.error["ename"] == "MemoryError":  # a forked copy's RLIMIT_DATA
            assert k.is_alive() and k.execute("1 + 1").status == "ok", "the kernel did not survive a refusal"
            return "over-limit allocation refused with MemoryError, the kernel alive"
        raise AssertionError("a 512 MB allocation survived a 256 MB limit")


def _check_pids_limit(new: Kernels) -> str:
    with new(pids=32) as k:
        code = (
            "import subprocess\nprocs = []\n"
            "try:\n    for _ in range(64):\n        procs.append(subprocess.Popen(['sleep', '5']))\n"
            "    outcome = 'unlimited'\nexcept OSError as e:\n    outcome = type(e).__name__\n"
            "for p in procs:\n    p.kill()\noutcome"
        )
        outcome = k.execute(code).outputs[-1]["data"]["text/plain"]
        assert outcome != "'unlimited'", "64 processes started under a limit of 32"
    return f"process limit enforced ({outcome})"


def _check_contract(new: Kernels) -> str:
    with new() as k:
        broken = {
            "kernel": broken_members(k, KernelLike),
            "kernel.snapshots": broken_members(k.snapshots, SnapshotsLike),
            "kernel.introspect": broken_members(k.introspect, IntrospectionLike),
            "kernel.launcher": broken_members(k.launcher, LauncherReadings),
        }
        broken = {part: members for part, members in broken.items() if members}
        assert not broken, f"{type(k).__name__} breaks the contract: {broken}"
        assert k.launcher.pid() is not None and isinstance(k.launcher.enforces_limits, bool)
    return f"{type(k).__name__}: every member of KernelLike and of its parts, with the contract's signatures"


def _check_interrupt(new: Kernels) -> str:
    with new() as k:
        k.execute("x = [1, 2, 3]")
        answered: dict[str, Any] = {}
        cell = threading.Thread(target=lambda: answered.update(result=k.execute("import time\ntime.sleep(30)")))
        cell.start()
        time.sleep(1.5)  # the cell is running
        k.interrupt()
        cell.join(timeout=30)
        stopped = answered["result"]
        assert stopped.status == "error" and stopped.error and stopped.error["ename"] == "KeyboardInterrupt", stopped
        assert k.restarts == 0 and k.introspect.inspect_variable("x").repr == "[1, 2, 3]"
    return "a running cell stopped by interrupt() from another thread; same process, state kept"


def _check_restart(new: Kernels) -> str:
    with new() as k:
        k.execute("x = 1")
        pid = k.launcher.pid()
        k.restart()
        assert k.restarts == 1 and k.is_alive() and k.launcher.pid() != pid, (k.restarts, pid)
        assert k.introspect.list_variables().total == 0, "the user's state survived a restart"
        assert k.execute("21 * 2").outputs[0]["data"]["text/plain"] == "42"
    return "a fresh process, counted, with an empty namespace"


def _check_dead_and_closed(new: Kernels) -> str:
    """The parts of a dead kernel raise KernelDiedError, as its own calls do; those of a closed one say it is
    not started (an InfrastructureError, not a death); close is idempotent."""
    with new() as k:
        k.execute("x = 1")
        info = k.snapshots.save()
        with suppress(KernelDiedError):
            k.execute("import os\nos._exit(3)")
        dead = (k.introspect.list_variables, k.introspect.fingerprint, k.snapshots.save, lambda: k.execute("1"))
        for ask in (*dead, lambda: k.snapshots.restore(info)):
            try:
                ask()
            except KernelDiedError:
                continue
            raise AssertionError(f"{ask} of a dead kernel did not raise KernelDiedError")
        k.close()
        k.close()
        assert not k.is_alive()
        for ask in (*dead, lambda: k.call("namespace_fingerprint")):
            try:
                ask()
            except KernelDiedError as exc:
                raise AssertionError(f"a closed kernel is not a dead one: {exc!r}") from exc
            except (InfrastructureError, SnapshotError):
                continue
            raise AssertionError(f"{ask} of a closed kernel was answered")
    return "dead: KernelDiedError from its parts; closed: not started, from its parts; close idempotent"


CHECKS: tuple[Check, ...] = (
    Check("start", "kernel starts and evaluates 1 + 1", _check_start),
    Check("contract", "the kernel and its parts offer the contract", _check_contract),
    Check("outputs", "every kind of output arrives in nbformat", _check_outputs),
    Check("timeout", "a runaway cell is interrupted and the state kept", _check_timeout_interrupt),
    Check("wedged", "a cell that ignores interrupts gets a restart", _check_timeout_restart),
    Check("output-cap", "huge outputs are truncated with a marker", _check_output_cap),
    Check("death", "a dying kernel raises KernelDiedError quickly", _check_death),
    Check("interrupt", "interrupt() stops a running cell and keeps the state", _check_interrupt),
    Check("restart", "restart() gives a fresh, empty process", _check_restart),
    Check("dead-and-closed", "a dead or closed kernel's parts fail as the kernel does", _check_dead_and_closed),
    Check("snapshot", "snapshot and restore round trip", _check_snapshot),
    Check("read-only-tools", "introspection leaves the state untouched", _check_readonly_introspection),
    Check("helper-errors", "the helper failing on user data leaves the kernel alone", _check_helper_errors),
    Check("workdir", "the kernel runs in a private copy of its working folder", _check_workdir),
    Check("no-network", "no network inside", _check_no_network, isolation=True),
    Check("read-only-root", "read-only root, non-root user", _check_readonly_root, isolation=True),
    Check("store-protected", "no kernel writes the snapshot store", _check_store_protected, isolation=True),
    Check("memory-limit", "memory limit enforced", _check_memory_limit, limits=True),
    Check("pids-limit", "process limit enforced", _check_pids_limit, limits=True),
)


def checks_for(kind: KernelKind) -> list[Check]:
    """The checks that apply to a kind (isolation and limit checks only where it claims them)."""
    return [c for c in CHECKS if (not c.isolation or kind.isolated) and (not c.limits or kind.enforces_limits)]


def run_check(check: Check, kind: KernelKind) -> CheckResult:
    """Run one check on a kind; failures become a failed result, never an exception."""
    started = time.perf_counter()
    try:
        detail = check.run(Kernels(kind))
        passed = True
    except Exception as exc:
        detail, passed = f"{type(exc).__name__}: {exc}", False
    return CheckResult(check.name, passed, detail, time.perf_counter() - started)
