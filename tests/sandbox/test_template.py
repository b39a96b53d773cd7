"""Kernels forked from a template, and copies of a state: the same kernels and states as started and
restored ones, independent of each other, and gone with their owner.

Real template processes and real forked ipykernels throughout; each test ends only what it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from tests.conftest import wait_for
from tests.sandbox.conftest import wait_ended
from themisto_env.errors import KernelDiedError, PrebuildWarning, SnapshotCorruptError, TemplateGoneError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.process import CONNECTION_FILE
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.sandbox.template.prebuild import prebuild_failures
from themisto_env.sandbox.template.shared import shared_template
from themisto_env.sandbox.template.states import STATE_TEMPLATES

STATE = """
import random
import numpy as np
import pandas as pd
threshold = 10
def above(values):
    return [v for v in values if v > threshold]
class Counter:
    def __init__(self):
        self.n = 0
frame = pd.DataFrame({"a": [1, 20, 30], "b": list("xyz")})
counter = Counter()
rng_draw = random.random()
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelTemplate]:
    store = tmp_path_factory.mktemp("template-store")
    with KernelTemplate("local", preload=("numpy", "pandas"), snapshot_dir=store) as template:
        yield template


@pytest.fixture(scope="module")
def state(template: KernelTemplate) -> tuple[str, dict[str, str]]:
    """A snapshot of STATE (written by a started kernel) and that kernel's fingerprint of it."""
    with Kernel("local", snapshot_dir=template.store.root) as kernel:
        assert kernel.execute(STATE).status == "ok"
        return kernel.snapshots.save().digest, kernel.introspect.fingerprint()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def test_a_forked_kernel_runs_cells_as_a_started_one(template: KernelTemplate) -> None:
    with template.kernel() as forked, Kernel("local") as started:
        for code in ("x = 40 + 2", "print(x)", "x / 0", "import pandas as pd; pd.DataFrame({'a': [1]})"):
            mine, theirs = forked.execute(code), started.execute(code)
            assert (mine.status, mine.text()) == (theirs.status, theirs.text()), code
        assert forked.introspect.inspect_variable("x").repr == "42"
        pid = forked.launcher.pid()
        assert pid is not None and pid not in (os.getpid(), template._process.pid())  # type: ignore[union-attr]
        assert Path(forked.run_dir).parent == template.kernels_dir


def test_a_forked_kernel_is_interrupted_at_its_time_limit_and_keeps_its_state(template: KernelTemplate) -> None:
    with template.kernel(limits=SandboxLimits(timeout_s=1.0)) as kernel:
        kernel.execute("kept = 'yes'")
        result = kernel.execute("import time; time.sleep(30)")
        assert result.status == "timeout"
        assert kernel.execute("kept").text() == "'yes'"


def test_restarting_a_copy_gives_an_empty_kernel(template: KernelTemplate, state: tuple[str, dict[str, str]]) -> None:
    digest, _ = state
    [copy] = template.copies(digest, 1)
    with copy:
        assert "frame" in copy.introspect.fingerprint()
        copy.restart()
        assert copy.introspect.fingerprint() == {}
        assert copy.execute("1 + 1").text() == "2"


def test_copies_hold_the_snapshot_state_as_a_restore_does(
    template: KernelTemplate, state: tuple[str, dict[str, str]]
) -> None:
    digest, written = state
    copies = template.copies(digest, 3)
    with Kernel("local", snapshot_dir=template.store.root) as restored:
        restored.snapshots.restore(digest)
        try:
            for copy in copies:
                assert copy.introspect.fingerprint() == written == restored.introspect.fingerprint()
                # functions see the namespace they live in, as in the kernel that defined them
                assert copy.execute("above([5, 15])").text() == restored.execute("above([5, 15])").text() == "[15]"
            copies[0].execute("threshold = 0")
            assert copies[0].execute("above([5, 15])").text() == "[5, 15]"
            # the copies are independent: a change in one is seen in no other, nor in the template
            assert copies[1].execute("above([5, 15])").text() == "[15]"
            copies[1].execute("counter.n += 1; frame.loc[0, 'a'] = -1")
            assert copies[2].execute("counter.n, int(frame.loc[0, 'a'])").text() == "(0, 1)"
            assert template.copies(digest, 1)[0].execute("counter.n, threshold").text() == "(0, 10)"
        finally:
            for copy in copies:
                copy.close()


SHELL_CHANGES = """
from IPython.core.magic import register_line_magic
@register_line_magic
def shout(line):
    return line.upper()
get_ipython().display_formatter.formatters["text/plain"].for_type(int, lambda n, p, cycle: p.text("int!"))
get_ipython().run_line_magic("load_ext", "autoreload")
get_ipython().run_line_magic("config", "PlainTextFormatter.max_width = 7")
import os
os.chdir("/")
"""
SHELL_PROBE = (
    "ip = get_ipython(); print('shout' in ip.magics_manager.magics['line'], "
    "'autoreload' in ip.extension_manager.loaded, ip.display_formatter.formatters['text/plain'].max_width, "
    "ip.kernel is not None, ip.history_manager.get_range(raw=True, output=False).__class__.__name__, "
    "sum(1 for _ in ip.history_manager.get_range()), os.getcwd() == os.environ['PWD'])"
)


def test_a_copys_shell_is_its_own_though_built_before_the_fork(
    template: KernelTemplate, state: tuple[str, dict[str, str]]
) -> None:
    """The IPython shell is built in the template, before the fork: a copy's magics, extensions, display
    formatters, configuration, history and folder changes reach no sibling, and each copy's shell speaks
    through its own kernel."""
    digest, _ = state
    for source in (template, template.state(digest)):
        first, second = source.kernel(), source.kernel()
        with first, second:
            assert first.execute("import os; 1 + 1").text() == "2"
            assert first.execute(SHELL_CHANGES).status == "ok"
            assert first.execute("41").text() == "int!"
            assert first.execute("%shout hello").text() == "'HELLO'"
            assert second.execute("import os; 41").text() == "41"
            assert second.execute("%shout hello").status == "error"
            probe = second.execute(SHELL_PROBE).text().split()
            assert probe[:4] == ["False", "False", "79", "True"], probe
            assert int(probe[5]) <= 3 and probe[6] == "True", probe  # its own history (its cells only), folder
            with template.kernel() as third:  # and what a later fork finds
                third_probe = third.execute("import os\n" + SHELL_PROBE).text().split()
                assert third_probe[:4] == ["False", "False", "79", "True"], third_probe


def front_end_answers(kernel: Kernel) -> dict[str, Any]:
    """What a front end asks a kernel besides cells, asked on a client of its own: ``kernel_info``, a
    completion, and the debugger's ``debugInfo`` (on the control channel)."""
    client = BlockingKernelClient(connection_file=str(kernel.run_dir / CONNECTION_FILE))
    client.load_connection_file()
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=True)
    try:
        info = client.kernel_info(reply=True, timeout=30)["content"]
        info["banner"] = info["banner"].split("Tip:")[0]  # IPython's banner ends in a tip drawn at random
        completed = client.complete("import collections; collections.Ordered", reply=True, timeout=30)["content"]
        request = {"type": "request", "seq": 1, "command": "debugInfo", "arguments": {}}
        client.control_channel.send(client.session.msg("debug_request", request))
        debug = client.get_control_msg(timeout=30)["content"]
    finally:
        client.stop_channels()
    return {"info": info, "matches": completed["matches"], "debug": debug}


MODULES_PROBE = (
    "import sys; k = get_ipython().kernel; "
    "(len(k._kernel_modules) > 100, k.debugger.kernel_modules is k._kernel_modules, "
    "sys.modules['ipykernel'].__file__ in k._kernel_modules)"
)


def test_a_copy_answers_a_front_end_as_a_started_kernel(
    template: KernelTemplate, state: tuple[str, dict[str, str]]
) -> None:
    """A forked kernel's start skips what the template did once (its module listings, the search for startup
    files): its kernel_info, completions, debugger, `%who` and `%reset --aggressive` answer as a started
    kernel's."""
    digest, _ = state
    with Kernel("local") as started, template.kernel() as forked, template.state(digest).kernel() as copy:
        for kernel in (started, forked):
            assert kernel.execute("%who").text() == "Interactive namespace is empty."
            kernel.execute("alpha = 1; beta = 2")
            assert kernel.execute("%who").text().split() == ["alpha", "beta"]
        assert copy.execute("%who").text().split() == sorted(
            ["Counter", "above", "counter", "frame", "np", "pd", "random", "rng_draw", "threshold"]
        )
        theirs = front_end_answers(started)
        for kernel in (forked, copy):
            mine = front_end_answers(kernel)
            assert mine["info"] == theirs["info"]
            assert mine["matches"] == theirs["matches"] == ["OrderedDict"]
            assert mine["debug"]["success"] and theirs["debug"]["success"], mine["debug"]
            assert mine["debug"]["body"].keys() == theirs["debug"]["body"].keys()
            assert not mine["debug"]["body"]["isStarted"]
            pid = kernel.launcher.pid()
            assert mine["debug"]["body"]["tmpFilePrefix"].endswith(f"ipykernel_{pid}/"), mine["debug"]["body"]
            # the debugger's list of library files (its "just my code" rules): the template's, of every module
            assert kernel.execute(MODULES_PROBE).text() == "(True, True, True)"
        assert started.execute(MODULES_PROBE).text() == "(True, True, True)"
        # `%reset --aggressive` drops the modules imported since the start, and not those loaded at the start
        # (a forked kernel's template imported pandas)
        for kernel, kept in ((started, "False"), (forked, "True"), (copy, "True")):
            probe = "import sys; 'colorsys' in sys.modules, 'pandas' in sys.modules"
            assert kernel.execute(probe).text() == f"(False, {kept})"
            kernel.execute("import colorsys")
            assert kernel.execute("%reset -f --aggressive").status == "ok"
            assert kernel.execute(probe).text() == f"(False, {kept})"


def test_a_copy_lists_the_modules_its_snapshot_imported(template: KernelTemplate) -> None:
    """A state template adds the modules its snapshot's load imported to its template's listings (without
    listing every module again): its copies' debugger knows their files, and `%reset --aggressive` keeps them,
    as it keeps what the template imported."""
    with Kernel("local", snapshot_dir=template.store.root) as kernel:
        kernel.execute("import colorsys, wave")
        digest = kernel.snapshots.save().digest
    probe = (
        "import sys; k = get_ipython().kernel; files = k._kernel_modules; "
        "[sys.modules[n].__file__ in files for n in ('colorsys', 'wave', 'pandas', 'ipykernel')]"
    )
    with template.kernel() as forked:
        assert forked.execute("import sys; 'colorsys' in sys.modules, 'wave' in sys.modules").text() == "(False, False)"
    with template.state(digest).kernel() as copy:
        assert copy.execute(probe).text() == "[True, True, True, True]"
        assert copy.execute("%reset -f --aggressive").status == "ok"
        kept = "import sys; 'colorsys' in sys.modules, 'wave' in sys.modules, 'pandas' in sys.modules"
        assert copy.execute(kept).text() == "(True, True, True)"


def test_a_forked_kernel_runs_pythonstartup_as_a_started_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The template looks for startup code once; a ``PYTHONSTARTUP`` file still runs in each forked kernel
    as in a started one, its names hidden from `%who` as IPython hides what its start defined."""
    startup = tmp_path / "startup.py"
    startup.write_text("import os\nstartup_ran = os.getpid()\n")
    monkeypatch.setenv("PYTHONSTARTUP", str(startup))
    with (
        KernelTemplate("local", snapshot_dir=tmp_path / "store", spares=0) as template,
        template.kernel() as forked,
        Kernel("local") as started,
    ):
        for kernel in (forked, started):
            assert kernel.execute("startup_ran == os.getpid()").text() == "True"
            assert kernel.execute("%who").text() == "Interactive namespace is empty."


#: A preloaded module that makes the template's prebuild fail for real: an IPython shell cannot be built in the
#: template's own process (a kernel forked from it builds its shell as usual).
BREAKS_PREBUILD = """
import os
from IPython.core.interactiveshell import InteractiveShell

TEMPLATE_PID = os.getpid()
_init_history = InteractiveShell.init_history


def init_history(self):
    if os.getpid() == TEMPLATE_PID:
        raise RuntimeError("no shell is built in this template")
    return _init_history(self)


InteractiveShell.init_history = init_history
"""


def test_a_failed_prebuild_is_warned_with_its_cause_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: KernelTemplate
) -> None:
    """A template that cannot build the kernel application before forking says so (a `PrebuildWarning` with
    the cause, and the count the server's metrics show); its kernels, built after the fork, still work."""
    assert template.prebuild_error is None  # the usual template: built, nothing said
    (tmp_path / "breaks_prebuild.py").write_text(BREAKS_PREBUILD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    before = prebuild_failures()
    with pytest.warns(PrebuildWarning, match="RuntimeError: no shell is built in this template") as said:
        broken = KernelTemplate("local", preload=("breaks_prebuild",), snapshot_dir=tmp_path / "store", spares=0)
        broken.start()
    with broken, broken.kernel() as kernel:
        assert len(said) == 1 and "the local kernel template" in str(said[0].message)
        assert prebuild_failures() == before + 1
        assert broken.prebuild_error == "RuntimeError: no shell is built in this template"
        assert kernel.execute("import breaks_prebuild; 6 * 7").text() == "42"
        assert kernel.execute("%who").text().split() == ["breaks_prebuild"]


def test_copies_draw_the_same_random_numbers_unless_reseeded(
    template: KernelTemplate, state: tuple[str, dict[str, str]]
) -> None:
    digest, _ = state
    draw = "import random, numpy as np; (random.random(), float(np.random.random()))"
    same = template.copies(digest, 2)
    try:
        assert same[0].execute(draw).text() == same[1].execute(draw).text()
    finally:
        for kernel in same:
            kernel.close()
    with KernelTemplate("local", snapshot_dir=template.store.root, reseed=True) as reseeding:
        differ = reseeding.copies(digest, 2)
        try:
            assert differ[0].execute(draw).text() != differ[1].execute(draw).text()
        finally:
            for kernel in differ:
                kernel.close()


def test_a_corrupt_snapshot_is_refused_and_nothing_is_loaded(template: KernelTemplate, tmp_path: Path) -> None:
    with (
        Kernel("local", snapshot_dir=tmp_path / "store") as kernel,
        KernelTemplate("local", snapshot_dir=tmp_path / "store") as own,
    ):
        kernel.execute("secret = 'kept'")
        digest = kernel.snapshots.save().digest
        path = own.store.path(digest)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(SnapshotCorruptError, match="does not match"):
            own.state(digest)
        assert own.is_alive()  # the template itself is untouched and forks as before
        with own.kernel() as fresh:
            assert fresh.introspect.fingerprint() == {}


def test_a_state_holding_an_open_file_is_not_forked(tmp_path: Path) -> None:
    with (
        Kernel("local", snapshot_dir=tmp_path / "store") as kernel,
        KernelTemplate("local", snapshot_dir=tmp_path / "store") as template,
    ):
        kernel.execute(f"log = open({str(tmp_path / 'log.txt')!r}, 'w'); log.write('a')")
        state = template.state(kernel.snapshots.save().digest)
        assert any("open file" in hazard for hazard in state.hazards), state.hazards
        assert template.hazards == []  # the template itself holds no file: kernels still fork


def test_a_killed_template_takes_its_kernels_and_is_replaced(tmp_path: Path) -> None:
    template = shared_template("local", snapshot_dir=tmp_path / "store")
    kernel = template.kernel()
    try:
        pid = template._process.pid()  # type: ignore[union-attr]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: not kernel.is_alive(), 10)  # the kernel sees its parent gone
        with pytest.raises(KernelDiedError):
            kernel.execute("1")
        replaced = shared_template("local", snapshot_dir=tmp_path / "store")
        assert replaced is not template and replaced.is_alive()
        with replaced.kernel() as fresh:
            assert fresh.execute("1 + 1").text() == "2"
        with pytest.raises(TemplateGoneError):
            template.kernel()  # the dead one forks nothing: a one-line error, not a hang
    finally:
        kernel.close()


OWNER = """
import json, sys
from themisto_env.sandbox.lifetime import reaper as lifetime
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.sandbox.template.prebuild import prebuild_failures
template = KernelTemplate("local", snapshot_dir=sys.argv[1]).start()
kernel = template.kernel()
kernel.execute("x = 1")
digest = kernel.snapshots.save().digest
copies = template.copies(digest, 2)
state = template.state(digest)
# a cell's worker process (in the kernel's process group), writing into the kernel's folder without pause
writer = kernel.execute(
    "import subprocess, sys; subprocess.Popen([sys.executable, '-c', %r]).pid" % sys.argv[3]
).text()
print(json.dumps({
    "template": template._process.pid(),
    "state": state.request({"op": "status"})["pid"],
    "kernels": [k.launcher.pid() for k in (kernel, *copies)],
    "writer": int(writer),
    "reapers": lifetime.reaper_pids(),
    "run_dir": str(template.run_dir),
}), flush=True)
if sys.argv[2] == "exit":
    sys.stdin.readline()  # the test has a pidfd of each process it was told of
else:  # more kernels are being forked and closed as the owner is killed
    more = []
    while True:
        for copy in more:
            copy.close()
        more = [template.kernel(), *template.copies(digest, 1)]
"""
#: The worker: files made and removed in its working folder, going on whatever fails.
WRITER = """
import itertools, os
for n in itertools.count():
    try:
        open(f"w{n % 32}", "w").close()
        if n % 32 == 31:
            for i in range(32):
                os.unlink(f"w{i}")
    except OSError:
        pass
"""
#: A guard only: the test waits for the processes' ends and the reaper's (pidfds), not for a time.
ENDS_GUARD_S = 90.0


@pytest.mark.parametrize("ending", ["exit", "wait"], ids=["normal exit", "SIGKILL"])
def test_nothing_outlives_the_owner(tmp_path: Path, ending: str, busy_machine: Callable[[], int]) -> None:
    """The template, its state templates, every kernel forked from them and what their cells started go with
    the process that made them, whether it exits or is SIGKILLed (while it forks kernels), on a busy machine;
    so does the template's directory. Cleanup is over when the reaper ends: then nothing may be left."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "store"), ending, WRITER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdin is not None and owner.stdout is not None
    pidfds: dict[int, int] = {}
    try:
        made = json.loads(owner.stdout.readline())
        processes = [made["template"], made["state"], *made["kernels"], made["writer"]]
        assert made["reapers"] and all(processes), made
        pidfds.update((pid, os.pidfd_open(pid)) for pid in [*processes, *made["reapers"]])
        assert all(alive(pid) for pid in processes), made  # the pidfds name them, not a later reuse of the pid
        busy_machine()  # from here on (the owner's setup, done, would only take longer)
        if ending == "wait":
            owner.send_signal(signal.SIGKILL)
        with contextlib.suppress(BrokenPipeError):  # a normal exit from here (a killed owner reads nothing)
            owner.stdin.write("end\n")
            owner.stdin.close()
        owner.wait(timeout=120)
        left = wait_ended(pidfds, ENDS_GUARD_S)
        assert not left, f"still running after the reaper was due to end: {left} of {made}"
        run_dir = Path(made["run_dir"])  # the reaper ended: nothing may be left, not even for a moment
        assert not run_dir.exists(), sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))[:20]
    finally:
        if owner.poll() is None:  # failed before its end: its reaper then cleans up
            owner.kill()
            owner.wait()
        for fd in pidfds.values():  # this test's processes only, through their pidfds (never a reused pid)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        for stream in (owner.stdin, owner.stdout):
            with contextlib.suppress(BrokenPipeError):
                stream.close()


def test_a_forked_kernel_finds_the_template_imports_done(template: KernelTemplate) -> None:
    """What a start spends its time on (the dataset's imports, ipykernel's own) is done once, in the template."""
    with template.kernel() as kernel:
        loaded = kernel.execute("import sys; 'pandas' in sys.modules, 'ipykernel.debugger' in sys.modules")
        assert loaded.text() == "(True, True)"
    with Kernel("local") as started:
        assert started.execute("import sys; 'pandas' in sys.modules").text() == "False"


def test_a_copy_outlives_its_state_leaving_the_cache(tmp_path: Path) -> None:
    """State templates are a bounded cache; one that leaves it while a copy of it is open stays until that
    copy is closed (a copy ends with its state template), then goes."""
    with (
        Kernel("local", snapshot_dir=tmp_path / "store") as kernel,
        KernelTemplate("local", snapshot_dir=tmp_path / "store", spares=0) as template,
    ):
        digests = []
        for i in range(STATE_TEMPLATES + 2):
            kernel.execute(f"x = {i}")
            digests.append(kernel.snapshots.save().digest)
        [first] = template.copies(digests[0], 1)
        first_state = template.state(digests[0])
        for digest in digests[1:]:
            template.state(digest)
        assert first_state.is_alive() and first.execute("x").text() == "0"
        first.close()
        template.state(digests[1])  # the cache is swept as it is used
        assert wait_for(lambda: not first_state.is_alive(), 10)
        [again] = template.copies(digests[0], 1)  # made again when asked
        with again:
            assert again.execute("x").text() == "0"


def test_a_bwrap_template_forks_kernels_as_isolated_as_started_ones(bwrap_backend: None, tmp_path: Path) -> None:
    """Forked inside the template's sandbox: the same answers and states as a started bwrap kernel, and its
    isolation from the host (no network, a read-only host, its own /tmp)."""
    store = tmp_path / "store"
    with KernelTemplate("bwrap", snapshot_dir=store) as template, Kernel("bwrap", snapshot_dir=store) as started:
        started.execute(STATE)
        digest = started.snapshots.save().digest
        [copy] = template.copies(digest, 1)
        with copy:
            assert copy.introspect.fingerprint() == started.introspect.fingerprint()
            assert copy.execute("above([5, 15])").text() == "[15]"
            home = Path.home() / "themisto-template-probe"  # the host's file system, outside the private /tmp
            probes = {
                "network": "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)",
                "host file": f"open({str(home)!r}, 'w')",
                "root": "import os; os.getuid()",
            }
            assert copy.execute(probes["network"]).status == started.execute(probes["network"]).status == "error"
            assert copy.execute(probes["host file"]).status == started.execute(probes["host file"]).status == "error"
            assert not home.exists()
            assert copy.execute(probes["root"]).text() == started.execute(probes["root"]).text() == "1000"


def test_threads_asking_for_the_shared_template_at_once_get_one_started_template(tmp_path: Path) -> None:
    """As inspect's samples do (tools in worker threads): every thread gets the same live template and a
    working kernel of it; none closes another's template while it starts."""
    import threading

    got: list[KernelTemplate] = []
    answers: list[str] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            template = shared_template("local", snapshot_dir=tmp_path / "store")
            got.append(template)
            with template.kernel() as kernel:
                answers.append(kernel.execute("6 * 7").text())
        except BaseException as exc:  # reported below, with the thread's error
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        assert answers == ["42"] * 4
        assert len({id(t) for t in got}) == 1 and got[0].is_alive()
    finally:
        for template in {id(t): t for t in got}.values():
            template.close()


def _threads_and_fds() -> tuple[int, int]:
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def test_open_kernels_cost_this_process_no_thread_and_closed_ones_leave_no_descriptor(
    template: KernelTemplate,
) -> None:
    """The clients of a process's kernels share one zmq context: an open kernel adds no thread to its owner
    (a context per client cost two: 500 served sessions held 1,000 threads), and a closed one leaves no socket
    open (jupyter_client's ``stop_channels`` opens the channels never used, to find them stopped)."""
    with template.kernel() as first:
        first.execute("1 + 1")  # the shared context exists from here on
        threads, fds = _threads_and_fds()
        kernels = [template.kernel() for _ in range(4)]
        try:
            assert all(kernel.execute("2 + 2").text() == "4" for kernel in kernels)
            assert _threads_and_fds()[0] <= threads + 1  # a spare being forked in the background, at most
        finally:
            for kernel in kernels:
                kernel.close()
        template.trim()  # the spares' clients closed too
        assert wait_for(lambda: _threads_and_fds()[1] <= fds, seconds=10), (_threads_and_fds(), fds)
        assert first.execute("3 + 3").text() == "6"  # its sockets untouched by the others' closing


def test_a_kernel_forked_past_a_thousand_open_descriptors_is_alive_and_its_death_seen(
    template: KernelTemplate,
) -> None:
    """A server with a hundred sessions open holds over 1,024 descriptors, so a new kernel's pidfd is past
    ``select``'s limit: its liveness must still be read right (it was read as "exited during start", and
    every session past about 115 lost its kernel)."""
    template.trim()  # no spare forked before the ballast: the kernel is forked now, its pidfd numbered past it
    ballast = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        kernel = template.kernel()
        try:
            assert kernel.launcher._pidfd >= 1024  # type: ignore[attr-defined]
            assert kernel.is_alive() and kernel.execute("1 + 1").text() == "2"
            pid = kernel.launcher.pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            assert wait_for(lambda: not kernel.is_alive(), seconds=10)
        finally:
            kernel.close()
    finally:
        for fd in ballast:
            os.close(fd)
