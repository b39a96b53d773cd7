"""Copies forked in one bwrap template sandbox for model-written code, each in namespaces of its own: what one
copy's code can do to its siblings and its template (nothing), and what is left once a copy or the template
closes (nothing).

Every test forks real copies in a real sandbox (as an unprivileged user: ``scripts/setup-bwrap-user.sh``); the
attacks run as model-written code would, as cells. From this process, a copy is seen through its keeper (the
process its template forked, outside the copy's pid namespace): every process of the copy is in the pid
namespace its keeper's children get, whose init (pid 1) reaps it and whose kernel is pid 2 there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from themisto_env.bridges.rl import ExecutionReward
from themisto_env.bridges.rl.export import export_samples
from themisto_env.errors import KernelDiedError
from themisto_env.sandbox.kernel import copy_namespaces
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.template import shared as templates
from themisto_env.sandbox.template.core import KernelTemplate

LIMITS = SandboxLimits(memory_mb=512, pids=64, timeout_s=10)
ALL_SAMPLES = {"max_length_quantile": None}


@pytest.fixture(scope="module")
def template(bwrap_backend: None) -> Iterator[KernelTemplate]:
    with KernelTemplate("bwrap", store_access="copy", limits=LIMITS, spares=0) as template:
        yield template


def _value(kernel: Kernel, code: str) -> object:
    """What a cell printed as its last line, decoded as JSON."""
    result = kernel.execute(code, timeout_s=30)
    assert result.status == "ok", result.outputs
    return json.loads(result.text().strip().splitlines()[-1])


def _alive_and_answering(kernel: Kernel) -> bool:
    return kernel.is_alive() and kernel.execute("print(6 * 7)", timeout_s=30).text().strip() == "42"


def _keeper(kernel: Kernel) -> int:
    pid = kernel.launcher.pid()
    assert pid is not None, "the copy's keeper is not running"
    return pid


def _namespace(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def _members(namespace: str) -> list[int]:
    """The processes (as this process sees them) in a pid namespace."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == namespace:
                    found.append(int(entry.name))
    return found


def _nspids(pid: int) -> list[int]:
    """A process's pid in each namespace from this process's down (``NSpid``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return [int(p) for p in next(line for line in status.splitlines() if line.startswith("NSpid")).split()[1:]]


def _kernel_pids(kernel: Kernel) -> list[int]:
    """The copy's kernel's pid in each namespace from this process's down (here, the template's sandbox, the
    copy's own: 2, its init's first child)."""
    keeper = _keeper(kernel)
    [init] = Path(f"/proc/{keeper}/task/{keeper}/children").read_text().split()
    children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
    [pids] = [p for p in map(_nspids, map(int, children)) if p[-1] == copy_namespaces.COPY_KERNEL_PID]
    return pids


def _wait_empty(namespace: str, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _members(namespace)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_the_fork_policy_forks_bwrap_model_code(bwrap_backend: None) -> None:
    assert copy_namespaces.nested_namespaces_refused() is None
    assert KernelSpec("bwrap", store_access="copy", fork=True).not_forked is None


def test_a_host_that_refuses_nested_namespaces_starts_bwrap_model_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where bwrap (here a stand-in that fails as bwrap does where user namespaces are off) cannot make the
    copies' namespaces, the probe says why, and model-written code is started, a sandbox each, saying so."""
    refusing = tmp_path / "bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setattr(shutil, "which", lambda name: str(refusing) if name == "bwrap" else None)
    monkeypatch.setattr(os, "geteuid", lambda: 1001)
    reason = copy_namespaces.nested_namespaces_refused.__wrapped__()
    assert reason is not None and "setting up uid map: Permission denied" in reason, reason
    monkeypatch.setattr(copy_namespaces, "nested_namespaces_refused", lambda: reason)
    spec = KernelSpec("bwrap", store_access="copy", fork=True)
    assert spec.not_forked is not None and "cannot isolate themselves" in spec.not_forked and reason in spec.not_forked
    assert spec.with_access("read").not_forked is None, "the env's own bwrap kernels are forked all the same"


def test_each_copy_has_namespaces_of_its_own_without_capabilities(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        probe = (
            "import os, json, resource\n"
            "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n"
            "procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
            "print(json.dumps([os.getpid(), procs, os.getuid(), caps, os.listdir('/tmp'), os.listdir('/dev/shm'),\n"
            "    resource.getrlimit(resource.RLIMIT_NPROC)]))"
        )
        template_pid = template._process.pid()
        assert template_pid is not None
        on_the_way = [template.run_dir.parts[2]] if template.run_dir.is_relative_to("/tmp") else []
        for kernel in (a, b):
            pid, procs, uid, caps, tmp, shm, nproc = _value(kernel, probe)  # type: ignore[misc]
            assert pid == 2 and procs == [1, 2], "the copy sees processes other than its own (its init, itself)"
            assert uid == 1000 and not any(int(c, 16) for c in caps), caps
            assert nproc == [LIMITS.pids, LIMITS.pids]
            assert shm == [] and tmp == on_the_way, tmp  # its /tmp is empty but for the way to its own folder
        for kind in ("user", "pid_for_children", "mnt", "net", "ipc"):
            seen = {_namespace(_keeper(a), kind), _namespace(_keeper(b), kind), _namespace(template_pid, kind)}
            assert len(seen) == 3, f"copies share their {kind} namespace"
    finally:
        a.close()
        b.close()


ATTACK = """import ctypes, json, os, signal, socket
results = {{}}
libc = ctypes.CDLL(None, use_errno=True)
own = {{int(t) for t in os.listdir('/proc/self/task')}}
def attempt(name, action):
    try:
        action()
        results[name] = 'done'
    except OSError as e:
        results[name] = type(e).__name__
def read_memory(pid):  # at a mapped address: offset 0 fails for anyone
    with open(f'/proc/{{pid}}/maps') as maps:
        start = int(maps.readline().split('-')[0], 16)
    with open(f'/proc/{{pid}}/mem', 'rb') as memory:
        memory.seek(start)
        memory.read(1)
def reachable(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
results['reachable pids'] = [p for p in range(2, 1 << 16) if p not in own and reachable(p)] or 'none'  # 1: its init
for target, pid in {targets}:
    if pid in own or pid == 1:
        continue  # the same number names one of this copy's own threads, or its own init, here
    attempt(f'signal {{target}}', lambda: os.kill(pid, signal.SIGKILL))
    attempt(f'memory {{target}}', lambda: read_memory(pid))
    attempt(f'environ {{target}}', lambda: open(f'/proc/{{pid}}/environ', 'rb').read(1))
    results[f'ptrace {{target}}'] = 'done' if libc.ptrace(16, pid, None, None) == 0 else os.strerror(ctypes.get_errno())
attempt('read sibling file', lambda: open({sibling_file}).read())
attempt('list sibling run dir', lambda: os.listdir({sibling_dir}))
attempt('write template run dir', lambda: open({template_dir} + '/planted', 'w'))
attempt('write the sandbox /dev', lambda: open('/dev/planted', 'w'))  # one tmpfs for the template and copies
results['template run dir'] = sorted(os.listdir({template_dir}))
def connect():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect({socket_path})
attempt('connect to template', connect)
def unmount():
    if libc.umount2({template_dir}.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), 'umount')
attempt('unmount the cover', unmount)
def nested():  # a user namespace of its own again: its capabilities there reach no mount of the copy's
    pid = os.fork()
    if pid == 0:
        code = 1
        if libc.unshare(0x10000000 | 0x00020000) == 0 and libc.umount2({template_dir}.encode(), 2) == 0:
            code = 0 if sorted(os.listdir({template_dir})) != ['ipython', 'kernels'] else 1
        os._exit(code)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        raise PermissionError('refused')
attempt('unmount the cover in a nested namespace', nested)
print(json.dumps(results))"""


def test_a_copy_cannot_signal_trace_or_read_its_siblings_or_its_template(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        write = "import os, json; open('secret', 'w').write('b'); print(json.dumps(os.path.abspath('secret')))"
        b_file = _value(b, write)
        template_pid = template._process.pid()
        assert template_pid is not None
        # the pids the template's sandbox gives b's kernel and b's keeper, and the template's (pid 1 there)
        targets = [("sibling", _kernel_pids(b)[1]), ("template", 1)]
        keeper_status = Path(f"/proc/{_keeper(b)}/status").read_text()
        targets.append(("sibling keeper", int(keeper_status.split("NSpid:")[1].split()[1])))
        attack = ATTACK.format(
            targets=repr(targets),
            sibling_file=json.dumps(b_file),
            sibling_dir=json.dumps(str(b.run_dir)),
            template_dir=json.dumps(str(template.run_dir)),
            socket_path=json.dumps(str(template.socket_path)),
        )
        results = _value(a, attack)
        assert isinstance(results, dict) and results
        assert results.pop("reachable pids") == "none", "the copy reaches processes beyond its own"
        # only the way to its own folder, and the IPython folder (read-only) its kernel reads
        assert results.pop("template run dir") == ["ipython", "kernels"], "the copy sees its template's files"
        assert not [name for name, outcome in results.items() if outcome == "done"], results
        assert _alive_and_answering(b) and template.is_alive()
        assert _value(b, "import os, json; print(json.dumps(open('secret').read()))") == "b"
    finally:
        a.close()
        b.close()


KILL_ALL = "import os, signal\nos.kill(-1, signal.SIGKILL)"
KILL_EVERY_PID = """import os, signal
for _p in os.listdir('/proc'):
    if _p.isdigit() and int(_p) != os.getpid():
        try:
            os.kill(int(_p), signal.SIGKILL)
        except OSError:
            pass
os.kill(os.getpid(), signal.SIGKILL)"""


@pytest.mark.parametrize("attack", [KILL_ALL, KILL_EVERY_PID], ids=["kill -1", "every pid"])
def test_killing_everything_visible_kills_only_the_copy(template: KernelTemplate, attack: str) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        with contextlib.suppress(KernelDiedError):  # kill(-1) spares the caller: the kernel may well survive
            a.execute(attack, timeout_s=10, interrupt=False)
        assert _alive_and_answering(b)
        c = template.kernel()  # the template lives and forks
        assert _alive_and_answering(c)
        c.close()
    finally:
        a.close()
        b.close()


def test_a_fork_bomb_is_bounded_by_the_copy_s_own_process_limit(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    namespace = _namespace(_keeper(a), "pid_for_children")
    try:
        code = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(600)\n        os._exit(0)"
        result = a.execute(code, timeout_s=10, interrupt=False)
        assert result.status == "error" and "BlockingIOError" in result.text(), result.outputs
        assert len(_members(namespace)) > LIMITS.pids // 2, "the bomb did not fork: no test"
        # the host sees the hit in /proc (the scorer's limit events), for this copy only
        assert a.launcher.limit_events().get("pids_max") == 1 and b.launcher.limit_events() == {}
        assert _alive_and_answering(b)
        children = b.execute("import os\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0); print('ok')")
        assert children.text().strip() == "ok", "the sibling cannot start a process of its own"
    finally:
        a.close()
        b.close()
    assert _wait_empty(namespace) == [], "processes of a closed copy are left"


def test_a_memory_bomb_is_the_copy_s_own_failure(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        result = a.execute("_hog = []\nwhile True:\n    _hog.append(b'x' * 2**24)", timeout_s=30, interrupt=False)
        assert result.status == "error" and "MemoryError" in result.text(), result.outputs
        # the host sees the kernel's data at its RLIMIT_DATA in /proc (the scorer's limit events)
        assert a.launcher.limit_events() == {"data_limit": 1} and b.launcher.limit_events() == {}
        assert _alive_and_answering(a) and _alive_and_answering(b)
        assert template.is_alive()
    finally:
        a.close()
        b.close()


def test_a_copy_allocates_its_allowance_and_a_cell_past_its_time_is_interrupted(template: KernelTemplate) -> None:
    """The copy's memory allowance is usable, and its keeper passes the host's SIGINT on to the kernel
    (through the copy's init, which takes only the signals it handles)."""
    a = template.kernel()
    try:
        assert _value(a, f"_big = bytearray({LIMITS.memory_mb - 64} * 2**20); print(int(len(_big) > 0))") == 1
        result = a.execute("while True:\n    pass", timeout_s=2)
        assert result.status == "timeout" and not result.kernel_restarted, result  # interrupted, not replaced
        assert _alive_and_answering(a)
    finally:
        a.close()


def test_a_copy_takes_its_own_lower_limits(template: KernelTemplate) -> None:
    """A kernel asked for with limits of its own gets them after the fork, not its template's: an allocation
    within the template's allowance fails within its own, and its process limit is its own."""
    own = SandboxLimits(memory_mb=128, pids=16, timeout_s=10)
    a, b = template.kernel(limits=own), template.kernel()
    try:
        probe = "import json, resource; print(json.dumps(resource.getrlimit(resource.RLIMIT_NPROC)))"
        assert _value(a, probe) == [own.pids, own.pids] and _value(b, probe) == [LIMITS.pids, LIMITS.pids]
        # within the template's allowance (512 MiB + the start's 256), well past its own (128 + 256)
        allocate = "_big = bytearray(448 * 2**20); print(1)"
        result = a.execute(allocate, timeout_s=30)
        assert result.status == "error" and "MemoryError" in result.text(), result.outputs
        assert b.execute(allocate, timeout_s=30).text().strip() == "1", "the template's limit refused it: no test"
        assert _alive_and_answering(a)
    finally:
        a.close()
        b.close()


def _zombies(namespace: str) -> list[int]:
    """The zombies of a pid namespace."""
    found = []
    for pid in _members(namespace):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                found.append(pid)
    return found


def test_orphans_of_a_copy_are_reaped_and_its_children_keep_their_exit_codes(template: KernelTemplate) -> None:
    """Daemonising code leaves no zombie in the copy (its init reaps the orphans), while the kernel's own
    children stay the kernel's to wait for: ``subprocess`` gets their exit codes."""
    a = template.kernel()
    try:
        daemonise = (  # each daemon outlives its parent (which the kernel waits for), then ends: an orphan
            "import os, time\n"
            "for _ in range(5):\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        os.setsid()\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(0.3)\n"
            "        os._exit(0)\n"
            "    os.waitpid(pid, 0)\n"
            "print(1)"
        )
        assert _value(a, daemonise) == 1
        namespace = _namespace(_keeper(a), "pid_for_children")
        deadline = time.monotonic() + 15  # the daemons end after 0.3 s: a zombie is still a member until reaped
        while len(members := _members(namespace)) > 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(members) == 2 and _zombies(namespace) == [], f"orphans of the copy left unreaped: {members}"
        code = "import subprocess, json\nprint(json.dumps([subprocess.run(['sh', '-c', f'exit {n}']).returncode"
        code += " for n in (0, 3, 7)]))"
        assert _value(a, code) == [0, 3, 7]
        assert _value(a, "import os, json; print(json.dumps(os.getppid()))") == 1, "the kernel is its init's child"
    finally:
        a.close()


def test_a_restarted_copy_is_isolated_again_and_keeps_its_files(template: KernelTemplate) -> None:
    a = template.kernel()
    try:
        assert _value(a, "open('mine.txt', 'w').write('x'); print(1)") == 1
        before = _namespace(_keeper(a), "pid_for_children")
        a.restart()
        assert _alive_and_answering(a)  # its namespace is nameable once its init runs (the kernel answers after)
        assert _namespace(_keeper(a), "pid_for_children") != before
        assert _value(a, "import os, json; print(json.dumps([os.getpid(), open('mine.txt').read()]))") == [2, "x"]
    finally:
        a.close()


def test_nothing_of_a_copy_outlives_it(template: KernelTemplate) -> None:
    """A daemon that left the copy's session, and its files in its /tmp, go with it."""
    a = template.kernel()
    daemon = (
        "import os, time\n"
        "open('/tmp/left-behind', 'w').write('x')\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\nprint(1)"
    )
    assert _value(a, daemon) == 1
    namespace, run_dir = _namespace(_keeper(a), "pid_for_children"), a.run_dir
    assert len(_members(namespace)) >= 2
    a.close()
    assert _wait_empty(namespace) == [], "a process of the closed copy is left"
    assert not run_dir.exists()
    b = template.kernel()
    try:
        assert _value(b, "import os, json; print(json.dumps(os.path.exists('/tmp/left-behind')))") is False
    finally:
        b.close()


def test_nothing_outlives_the_template(bwrap_backend: None) -> None:
    template = KernelTemplate("bwrap", store_access="copy", limits=LIMITS).start()
    run_dir = template.run_dir
    copies = [template.kernel(), template.kernel()]
    copies[0].execute("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)")
    namespaces = [_namespace(_keeper(k), "pid_for_children") for k in copies]
    assert all(_members(n) for n in namespaces)
    template.close()
    assert not any(_wait_empty(n) for n in namespaces), "a copy's process outlived its template"
    assert not run_dir.exists()
    for kernel in copies:
        kernel.close()


SNAPSHOT_ATTACK = """import json, os, socket
results = {}
own = {int(t) for t in os.listdir('/proc/self/task')}
def read_memory(pid):
    with open(f'/proc/{pid}/maps') as maps:
        start = int(maps.readline().split('-')[0], 16)
    with open(f'/proc/{pid}/mem', 'rb') as memory:
        memory.seek(start)
        memory.read(1)
def attempt(name, action):
    try:
        action()
        results[name] = 'done'
    except OSError as e:
        results[name] = type(e).__name__
if SIBLING_PID not in own:
    attempt('signal sibling', lambda: os.kill(SIBLING_PID, 0))
    attempt('memory sibling', lambda: read_memory(SIBLING_PID))
attempt('read sibling file', lambda: open(SIBLING_FILE).read())
def connect():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(SOCKET)
attempt('connect to template', connect)
for folder in (TEMPLATE_DIR, '.'):
    try:
        with open(os.path.join(folder, 'attack.json'), 'w') as f:
            json.dump(results, f)
        break
    except OSError:
        continue
"""


class _Unpickled:
    """Runs ``source`` when unpickled (what any snapshot may do: its bytes are the dataset's code)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[object, tuple[str, dict[str, object]]]:
        return exec, (self.source, {})


def test_a_hostile_snapshot_reaches_no_sibling(template: KernelTemplate) -> None:
    """A snapshot whose unpickling tries to reach a sibling copy and the template (what the dataset's code
    could do): every attempt must fail, wherever the snapshot is loaded."""
    import hashlib
    import pickle

    sibling = template.kernel()
    copy = None
    try:
        secret = _value(
            sibling, "import json, os; open('secret', 'w').write('b'); print(json.dumps(os.path.abspath('secret')))"
        )
        source = SNAPSHOT_ATTACK
        for name, value in {
            "SIBLING_PID": _kernel_pids(sibling)[1],
            "SIBLING_FILE": json.dumps(secret),
            "SOCKET": json.dumps(str(template.socket_path)),
            "TEMPLATE_DIR": json.dumps(str(template.run_dir)),
        }.items():
            source = source.replace(name, str(value))
        data = pickle.dumps({"attack": _Unpickled(source), "x": 41})
        digest = hashlib.sha256(data).hexdigest()
        template.store.add(digest, data)
        [copy] = template.copies(digest, 1)
        assert _value(copy, "print(x + 1)") == 42, "the state did not load"
        written = [template.run_dir / "attack.json", copy.snapshots.workdir / "attack.json"]
        results = json.loads(next(path for path in written if path.exists()).read_text())
        assert results and not [name for name, outcome in results.items() if outcome == "done"], results
        assert _alive_and_answering(sibling)
    finally:
        sibling.close()
        if copy is not None:
            copy.close()


OWNER = """import json, os, sys, time
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.template.core import KernelTemplate
template = KernelTemplate('bwrap', store_access='copy', limits=SandboxLimits(memory_mb=512, pids=64)).start()
copies = [template.kernel(), template.kernel()]
copies[0].execute("import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(600)")
spaces = [os.readlink(f'/proc/{k.launcher.pid()}/ns/pid_for_children') for k in copies]
print(json.dumps({'namespaces': spaces, 'run_dir': str(template.run_dir)}))
sys.stdout.flush()
time.sleep(600)
"""


@pytest.mark.slow
def test_nothing_outlives_a_sigkilled_owner(bwrap_backend: None) -> None:
    """The owner SIGKILLed with a template sandbox and copies open (one with a daemon): the sandbox dies with
    it, each keeper with the template, each copy's namespace with its keeper; the run directory goes too."""
    import subprocess
    import sys

    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        made = json.loads(owner.stdout.readline())
        first, second = made["namespaces"]
        assert len(_members(first)) >= 2 and _members(second), "the copies (and the daemon) are not running"
        owner.kill()
        owner.wait(timeout=60)
        assert not any(_wait_empty(n, 30) for n in made["namespaces"]), "a copy's process is left"
        deadline = time.monotonic() + 60
        while Path(made["run_dir"]).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(made["run_dir"]).exists(), "the template's run directory is left"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


# -- a GRPO group: one hostile completion, the others scored as alone ---------------------------------------

FORK_BOMB = "import os\nwhile True:\n    os.fork()"
MEMORY_BOMB = "_hog = []\nwhile True:\n    _hog.append(b'x' * 2**24)"


@pytest.mark.slow
def test_a_hostile_copy_leaves_its_group_scored_as_alone(env_dataset: dict[str, str], bwrap_backend: None) -> None:
    """A group of 8 completions of one sample, forked in one sandbox: one completion kills every process it
    can (``kill(-1)``, every visible pid), fork-bombs or memory-bombs; every other completion scores exactly
    what it scores in a group without it."""
    rows = export_samples("next-cell", "static", **env_dataset, sample_rule=ALL_SAMPLES)
    row = next(r for r in rows if r["target"].startswith("by_region"))
    target = row["target"]
    honest = [
        target,
        "by_region = sales['units'].sum()",
        "by_region = sales.groupby('region')['units'].sum()",
        target + "\nprint('done')",
        "x = 1",
        "",
        "sales.head()",
    ]
    limits = {"memory_mb": 512, "pids": 64, "timeout_s": 5}
    options = {**env_dataset, "backend": "bwrap", "limits": limits, "sample_rule": ALL_SAMPLES, "parse": False}
    groups = {"clean": "by_region = 0", "kill -1": KILL_ALL, "every pid": KILL_EVERY_PID}
    groups |= {"fork bomb": FORK_BOMB, "memory bomb": MEMORY_BOMB}
    scores = {}
    try:
        with ExecutionReward(value="execution_score", **options) as reward:
            for name, hostile in groups.items():
                completions = [*honest[:3], hostile, *honest[3:]]
                scores[name] = reward(completions=completions, sample_id=[row["sample_id"]] * len(completions))
            assert templates._SHARED, "the group was not forked"
    finally:
        templates.close_shared_templates()
    clean = scores.pop("clean")
    assert clean[0] == 1.0, clean
    for name, group in scores.items():
        # a killing copy ends itself (every pid) or survives (kill(-1) spares the caller and its namespace's
        # init): it scores nothing either way; a bomb fails its cell at its own limit
        assert group[3] < 0.1, (name, group)
        assert group[:3] + group[4:] == clean[:3] + clean[4:], (name, group, clean)


def test_a_copys_kernel_cannot_reach_its_init(template: KernelTemplate) -> None:
    """The copy's init holds the pipe through which the kernel's exit status reaches its keeper. The kernel
    (the same uid, no capability) can neither open the init's descriptors nor ptrace it: it cannot forge its
    own end, nor fill the pipe so that the init, and the namespace's orphans with it, never end."""
    a = template.kernel()
    try:
        code = (
            "import ctypes, json, os\n"
            "found = {}\n"
            "try:\n"
            "    found['fds'] = os.listdir('/proc/1/fd')\n"
            "except OSError as e:\n"
            "    found['fds'] = type(e).__name__\n"
            "found['ptrace'] = ctypes.CDLL(None, use_errno=True).ptrace(16, 1, 0, 0)\n"  # PTRACE_ATTACH
            "print(json.dumps(found))"
        )
        found = _value(a, code)
        assert found == {"fds": "PermissionError", "ptrace": -1}, found
        assert _alive_and_answering(a)
    finally:
        a.close()
