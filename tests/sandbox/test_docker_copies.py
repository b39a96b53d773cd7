"""Copies forked in one docker template container, each with a uid of its own: what one copy's code can do
to its siblings and its template (nothing), and what is left once a copy or the template closes (nothing).

Every test here forks real copies in a real container; the attacks run as model-written code would, as cells.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from themisto_env.bridges.rl import ExecutionReward
from themisto_env.bridges.rl.export import export_samples
from themisto_env.errors import InfrastructureError, KernelDiedError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.forked import ForkLauncher
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.template import shared as templates
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.state.copies import CodeRun, DisposableKernels

LIMITS = SandboxLimits(memory_mb=512, pids=64, timeout_s=10)
ALL_SAMPLES = {"max_length_quantile": None}


@pytest.fixture(scope="module")
def template(docker_engine: None) -> Iterator[KernelTemplate]:
    with KernelTemplate("docker", store_access="copy", limits=LIMITS, spares=0) as template:
        yield template


def _value(kernel: Kernel, code: str) -> object:
    """What a cell printed as its last line, decoded as JSON."""
    result = kernel.execute(code, timeout_s=30)
    assert result.status == "ok", result.outputs
    return json.loads(result.text().strip().splitlines()[-1])


def _pid(kernel: Kernel) -> int:
    """The kernel's pid as the container sees it."""
    return int(_value(kernel, "import os; print(os.getpid())"))  # type: ignore[call-overload]


def _identity(kernel: Kernel) -> int:
    launcher = kernel.launcher
    assert isinstance(launcher, ForkLauncher) and launcher.identity is not None
    return launcher.identity.uid


def _alive_and_answering(kernel: Kernel) -> bool:
    return kernel.is_alive() and kernel.execute("print(6 * 7)", timeout_s=30).text().strip() == "42"


def test_each_copy_runs_as_a_uid_of_its_own_without_capabilities(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        probe = (
            "import os, json, resource, tempfile\n"
            "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]\n"
            "print(json.dumps([os.getresuid(), os.getresgid(), os.getgroups(), caps, tempfile.gettempdir(),\n"
            "    resource.getrlimit(resource.RLIMIT_NPROC), open('/proc/self/oom_score_adj').read().strip()]))"
        )
        seen_a, seen_b = _value(a, probe), _value(b, probe)
        uid_a, uid_b = _identity(a), _identity(b)
        assert uid_a != uid_b
        for seen, uid, kernel in ((seen_a, uid_a, a), (seen_b, uid_b, b)):
            assert seen[0] == [uid] * 3 and seen[1] == [uid] * 3 and seen[2] == [], seen  # type: ignore[index]
            effective, permitted = seen[3][0], seen[3][1]  # type: ignore[index]
            assert int(effective, 16) == 0 and int(permitted, 16) == 0, seen
            assert seen[4] == str(kernel.run_dir / "tmp") and seen[5] == [LIMITS.pids, LIMITS.pids], seen  # type: ignore[index]
            assert seen[6] == "1000", "the OOM killer must take a copy before its template"  # type: ignore[index]
    finally:
        a.close()
        b.close()


def test_a_copy_cannot_signal_trace_or_read_its_siblings_or_its_template(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        b_pid = _pid(b)
        write = "import os, json; open('secret', 'w').write('b'); print(json.dumps(os.path.abspath('secret')))"
        b_file = _value(b, write)
        attack = f"""import ctypes, json, os, signal, socket
results = {{}}
template = os.getppid()
def attempt(name, action):
    try:
        action()
        results[name] = 'done'
    except OSError as e:
        results[name] = type(e).__name__
for target, pid in (('sibling', {b_pid}), ('template', template)):
    attempt(f'signal {{target}}', lambda: os.kill(pid, 0))
    attempt(f'memory {{target}}', lambda: open(f'/proc/{{pid}}/mem', 'rb').read(1))
    attempt(f'environ {{target}}', lambda: open(f'/proc/{{pid}}/environ', 'rb').read(1))
    libc = ctypes.CDLL(None, use_errno=True)
    results[f'ptrace {{target}}'] = 'done' if libc.ptrace(16, pid, None, None) == 0 else os.strerror(ctypes.get_errno())
attempt('read sibling file', lambda: open({json.dumps(b_file)}).read())
attempt('list sibling run dir', lambda: os.listdir({json.dumps(str(b.run_dir))}))
attempt('list template run dir', lambda: os.listdir({json.dumps(str(template.run_dir))}))
def connect():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect({json.dumps(str(template.socket_path))})
attempt('connect to template', connect)
print(json.dumps(results))"""
        results = _value(a, attack)
        assert isinstance(results, dict) and results
        assert not [name for name, outcome in results.items() if outcome == "done"], results
        assert _alive_and_answering(b)
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
        with contextlib.suppress(KernelDiedError):  # kill(-1) spares the caller; the other ends it
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
    try:
        code = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(600)\n        os._exit(0)"
        result = a.execute(code, timeout_s=10, interrupt=False)
        assert result.status == "error" and "BlockingIOError" in result.text(), result.outputs
        assert a.launcher.limit_events().get("pids_max"), "the process limit hit is not seen from outside"
        assert not b.launcher.limit_events(), "a sibling's limit hit was counted as this copy's"
        assert _alive_and_answering(b)
        children = b.execute("import os\npid = os.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0); print('ok')")
        assert children.text().strip() == "ok", "the sibling cannot start a process of its own"
    finally:
        uid = _identity(a)
        a.close()
        b.close()
    assert _tasks(uid) == 0, "processes of a closed copy are left"


def test_a_memory_bomb_is_the_copy_s_own_failure(template: KernelTemplate) -> None:
    a, b = template.kernel(), template.kernel()
    try:
        result = a.execute("_hog = []\nwhile True:\n    _hog.append(b'x' * 2**24)", timeout_s=30, interrupt=False)
        assert result.status == "error" and "MemoryError" in result.text(), result.outputs
        assert a.launcher.limit_events().get("data_limit"), "the memory limit hit is not seen from outside"
        assert not b.launcher.limit_events()
        assert _alive_and_answering(a) and _alive_and_answering(b)
        assert template.is_alive()
    finally:
        a.close()
        b.close()


# an allocation that ends 32 MiB short of the copy's RLIMIT_DATA: legal, and within the inference's margin
NEAR_THE_ALLOWANCE = (
    "import re\n"
    "_limit = int(re.search(r'Max data size\\s+(\\d+)', open('/proc/self/limits').read()).group(1))\n"
    "_data = int(re.search(r'VmData:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024\n"
    "_big = bytearray(_limit - _data - 32 * 2**20)\n"
    "print(len(_big) > 0)"
)


def test_a_large_but_legal_allocation_fails_nothing(template: KernelTemplate) -> None:
    """Data near the copy's allowance is inferred as a memory hit: it names the failure of code that failed
    (the memory bomb above), and never fails code that ran to its end."""
    from themisto_env.state.copies import _LimitWatch

    a = template.kernel()
    try:
        with _LimitWatch(a) as watch:
            result = a.execute(NEAR_THE_ALLOWANCE, timeout_s=30, interrupt=False)
        assert result.status == "ok", result.outputs
        assert watch.seen.get("data_limit"), "the allocation did not come near the allowance: no test"
        assert watch.hit(ran=True) is None, "a cell that ran to its end was failed for its memory"
        assert watch.hit(ran=False) is not None and watch.hit(ran=False)[0] == "memory"
    finally:
        a.close()


def test_a_restarted_copy_keeps_its_uid_and_answers(template: KernelTemplate) -> None:
    """A restart (a wedged cell, a dead kernel) forks an empty kernel in the copy's place, with the copy's uid:
    the connection file, log and work it made stay readable to it."""
    a = template.kernel()
    try:
        uid = _identity(a)
        assert _value(a, "open('mine.txt', 'w').write('x'); print(1)") == 1
        a.restart()
        assert _identity(a) == uid
        assert _value(a, "import json; print(json.dumps(open('mine.txt').read() == 'x'))") is True
    finally:
        a.close()
    assert _tasks(uid) == 0


def _tasks(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def test_nothing_of_a_copy_outlives_it(template: KernelTemplate) -> None:
    """A daemon that left the copy's session, and its files in the container's shared /tmp, go with it."""
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
    uid, run_dir = _identity(a), a.run_dir
    assert _tasks(uid) >= 2
    a.close()
    assert _tasks(uid) == 0, "a process of the closed copy is left"
    assert not run_dir.exists()
    b = template.kernel()
    try:
        assert _value(b, "import os, json; print(json.dumps(os.path.exists('/tmp/left-behind')))") is False
    finally:
        b.close()


def test_a_daemon_that_stops_its_uid_s_processes_neither_outlives_its_copy_nor_hangs_the_template(
    template: KernelTemplate,
) -> None:
    """A daemon that keeps sending SIGSTOP to every process of its uid (the template's reap child takes that uid
    to end them): the copy's close still ends it, and the template goes on forking."""
    a = template.kernel()
    stopper = (
        "import os, signal, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    while not os.path.exists('go'):\n"
        "        time.sleep(0.01)\n"
        "    while True:\n"
        "        try:\n"
        "            os.kill(-1, signal.SIGSTOP)\n"
        "        except OSError:\n"
        "            pass\n"
        "print(1)"
    )
    assert _value(a, stopper) == 1
    uid, kernel_pid = _identity(a), a.launcher.pid()
    assert kernel_pid is not None
    (a.snapshots.workdir / "go").write_text("")
    deadline = time.monotonic() + 30
    while _state(kernel_pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(kernel_pid) == "T", "the daemon never stopped its kernel"
    a.close()
    assert _tasks(uid) == 0, "a process of the closed copy is left"
    b = template.kernel()
    try:
        assert _alive_and_answering(b), "the template stopped forking"
    finally:
        b.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_nothing_outlives_the_template(docker_engine: None) -> None:
    import docker

    template = KernelTemplate("docker", store_access="copy", limits=LIMITS).start()
    name = template._process.container_name
    run_dir = template.run_dir
    copies = [template.kernel(), template.kernel()]
    uids = [_identity(k) for k in copies]
    template.close()
    deadline = time.monotonic() + 10
    while any(_tasks(uid) for uid in uids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_tasks(uid) for uid in uids)
    assert not run_dir.exists()
    assert not docker.from_env().containers.list(all=True, filters={"name": name}, ignore_removed=True)
    for kernel in copies:
        kernel.close()


def test_the_template_container_goes_with_its_last_holder(env_dataset: dict[str, str], docker_engine: None) -> None:
    """A reward (or an env) that forked model code on docker holds the process's template container: once the
    last holder is closed, no container of this process is left (before, it stayed until the process ended)."""
    import docker

    templates.close_shared_templates()
    own = {"label": f"themisto-env.host-pid={os.getpid()}"}
    before = {c.id for c in docker.from_env().containers.list(all=True, filters=own, ignore_removed=True)}
    row = export_samples("next-cell", "static", **env_dataset, sample_rule=ALL_SAMPLES)[0]
    options = {**env_dataset, "backend": "docker", "limits": LIMITS.model_dump(), "sample_rule": ALL_SAMPLES}
    with ExecutionReward(value="execution_score", parse=False, **options) as first:
        with ExecutionReward(value="execution_score", parse=False, **options) as second:
            second(completions=["x = 1"], sample_id=[row["sample_id"]])
        assert templates._SHARED, "the first reward still holds the template"
        first(completions=["x = 2"], sample_id=[row["sample_id"]])
    assert not templates._SHARED
    after = {c.id for c in docker.from_env().containers.list(all=True, filters=own, ignore_removed=True)}
    assert after <= before  # (another test's template may still run in this process: the module's own)


# -- a GRPO group: one hostile completion, the others scored as alone ---------------------------------------

FORK_BOMB = "import os\nwhile True:\n    os.fork()"
MEMORY_BOMB = "_hog = []\nwhile True:\n    _hog.append(b'x' * 2**24)"


@pytest.mark.slow
def test_a_hostile_copy_leaves_its_group_scored_as_alone(env_dataset: dict[str, str], docker_engine: None) -> None:
    """A group of 8 completions of one sample, forked in one container: one completion kills every process
    it can (``kill(-1)``, every visible pid), fork-bombs or memory-bombs; every other completion scores
    exactly what it scores in a group without it."""
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
    options = {**env_dataset, "backend": "docker", "limits": limits, "sample_rule": ALL_SAMPLES, "parse": False}
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
        assert group[3] == 0.0, (name, group)
        assert group[:3] + group[4:] == clean[:3] + clean[4:], (name, group, clean)


OWNER = """import json, sys, time
from themisto_env.sandbox.models import SandboxLimits
from themisto_env.sandbox.template.core import KernelTemplate
template = KernelTemplate('docker', store_access='copy', limits=SandboxLimits(memory_mb=512, pids=64)).start()
copies = [template.kernel(), template.kernel()]
copies[0].execute("import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(600)")
uids = [k.launcher.identity.uid for k in copies]
print(json.dumps({'container': template._process.container_name, 'uids': uids, 'run_dir': str(template.run_dir)}))
sys.stdout.flush()
time.sleep(600)
"""


@pytest.mark.slow
def test_nothing_outlives_a_sigkilled_owner(docker_engine: None) -> None:
    """The owner SIGKILLed with a template container and copies open (one with a daemon): its reaper removes
    the container, and with it every copy's processes; the run directory goes too."""
    import subprocess
    import sys

    import docker

    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        made = json.loads(owner.stdout.readline())
        assert all(_tasks(uid) for uid in made["uids"]), made
        owner.kill()
        owner.wait(timeout=60)
        client = docker.from_env()
        deadline = time.monotonic() + 60

        def container_left() -> bool:  # ignore_removed: a container removed between listing and reading
            return bool(client.containers.list(all=True, filters={"name": made["container"]}, ignore_removed=True))

        while time.monotonic() < deadline and (container_left() or Path(made["run_dir"]).exists()):
            time.sleep(0.2)
        assert not container_left(), "the container is left"
        assert not any(_tasks(uid) for uid in made["uids"]), "a copy's process is left"
        assert not Path(made["run_dir"]).exists(), "the template's run directory is left"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


# -- the container's shared totals: a copy killed for the container's sake is not its code's failure --------


@pytest.fixture(scope="module")
def crowded(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelTemplate]:
    """A template container of its own for the tests that fill it (its cgroup's counters rise for good) or
    hand it a hostile snapshot (its own snapshot store)."""
    store = tmp_path_factory.mktemp("hostile-store")
    with KernelTemplate("docker", store_access="copy", limits=LIMITS, spares=0, snapshot_dir=store) as template:
        yield template


def _run_code(kernel: Kernel, code: str) -> CodeRun:
    """Run ``code`` in a copy as model-written code is run (sealed, watched, judged: the disposable kernels'
    own path from the code on)."""
    disposable = DisposableKernels("docker", limits=LIMITS, pool_size=0)
    try:
        token, before = kernel.introspect.seal(), kernel.introspect.fingerprint()
        return disposable._run_code(kernel, code, token, before, timeout_s=60)
    finally:
        disposable.close()


def _cgroup(template: KernelTemplate, controller: str, name: str) -> int:
    """A counter of the template container's cgroup (v1, cgroupfs: this machine's engine)."""
    container_id = template._process._container.id
    for folder in (
        Path(f"/sys/fs/cgroup/{controller}/docker", container_id),
        Path("/sys/fs/cgroup/docker", container_id),
    ):
        if (folder / name).exists():
            return int((folder / name).read_text().split()[0])
    pytest.skip(f"no {controller} cgroup of the container found on this host")


HOLDER = """import os, sys, threading, time
amount, kind, ready, release = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
held = []
if kind == 'memory':
    held.append(b'x' * amount)
else:
    for _ in range(amount):
        try:
            t = threading.Thread(target=time.sleep, args=(600,), daemon=True)
            t.start()
        except RuntimeError:
            break
        held.append(t)
open(ready, 'w').write(str(len(held)))
while not os.path.exists(release):
    time.sleep(0.05)
os._exit(0)
"""


@contextlib.contextmanager
def _holding(template: KernelTemplate, kind: str, amount: int) -> Iterator[None]:
    """A process of the container (not a copy: as the template or a spare would) holding ``amount`` bytes of
    memory or ``amount`` threads, until the block ends."""
    ready, release = template.run_dir / f"held-{kind}", template.run_dir / f"release-{kind}"
    ready.unlink(missing_ok=True)
    release.unlink(missing_ok=True)
    command = ["python", "-c", HOLDER, str(amount), kind, str(ready), str(release)]
    template._process._container.exec_run(command, user="0:0", detach=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the holder never held"
        yield
    finally:
        release.write_text("")
        time.sleep(0.5)


def test_a_copy_killed_when_the_container_s_memory_runs_out_is_an_infrastructure_fault(
    crowded: KernelTemplate,
) -> None:
    """The container's memory is a share of all it holds: filled by another of its processes, the OOM killer
    takes a copy whose allocation is well within its own allowance. That run is unscored, never the code's."""
    innocent = crowded.kernel()
    try:
        free = _cgroup(crowded, "memory", "memory.limit_in_bytes") - _cgroup(crowded, "memory", "memory.usage_in_bytes")
        held = _holding(crowded, "memory", free - (256 << 20))
        fault = pytest.raises(InfrastructureError, match="container this copy shares with others ran out of memory")
        with held, fault:
            _run_code(innocent, "_mine = b'x' * (400 * 2**20)\nprint(len(_mine))")
        assert not innocent.is_alive(), "the copy was not killed: no test"
    finally:
        innocent.close()


def test_a_copy_refused_a_thread_when_the_container_s_processes_run_out_is_an_infrastructure_fault(
    crowded: KernelTemplate,
) -> None:
    """The container's process limit is a share too: filled by another of its processes, a copy far below
    its own limit is refused a thread. That run is unscored, never the code's error."""
    innocent = crowded.kernel()
    try:
        free = _cgroup(crowded, "pids", "pids.max") - _cgroup(crowded, "pids", "pids.current")
        code = "import threading, time\nfor _ in range(16):\n    threading.Thread(target=time.sleep, args=(5,)).start()"
        held = _holding(crowded, "pids", free - 4)
        fault = pytest.raises(InfrastructureError, match="container this copy shares with others ran out of processes")
        with held, fault:
            _run_code(innocent, code)
    finally:
        innocent.close()


@pytest.mark.parametrize(
    ("bomb", "failure"),
    [
        (MEMORY_BOMB, "memory"),
        ("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(600)", "processes"),
    ],
    ids=["memory bomb", "fork bomb"],
)
def test_a_copy_beyond_its_own_limit_is_its_own_failure_in_a_shared_container(
    crowded: KernelTemplate, bomb: str, failure: str
) -> None:
    """In the container the tests above filled (its counters high for good), a copy that goes beyond its own
    allowance fails by its own doing: scored as the model's, not excused as the container's."""
    kernel, sibling = crowded.kernel(), crowded.kernel()
    try:
        run = _run_code(kernel, bomb)
        assert run.status == "failed" and run.failure == failure, run
        assert _alive_and_answering(sibling)
    finally:
        kernel.close()
        sibling.close()


# -- a hostile snapshot: unpickling is the dataset's code, and it runs with no more than a copy's rights -------

SNAPSHOT_ATTACK = """import json, os, signal
results = {'uid': os.getresuid()}
def attempt(name, action):
    try:
        action()
        results[name] = 'done'
    except OSError as e:
        results[name] = type(e).__name__
attempt('become root', lambda: os.setresuid(0, 0, 0))
attempt('become the sibling', lambda: os.setresuid(SIBLING_UID, SIBLING_UID, SIBLING_UID))
attempt('read the sibling file', lambda: open(SIBLING_FILE).read())
attempt('signal the sibling', lambda: os.kill(SIBLING_PID, signal.SIGKILL))
attempt('write the template folder', lambda: open(os.path.join(TEMPLATE_DIR, 'pwned'), 'w').write('x'))
attempt('replace the owner record', lambda: os.replace(os.path.join(os.getcwd(), 'attack.json'), OWNER_RECORD))
attempt('signal the template', lambda: os.kill(os.getppid(), 0))
with open('attack.json', 'w') as f:
    json.dump(results, f)
"""


class _Unpickled:
    """Runs ``source`` when unpickled (what any snapshot may do: its bytes are the dataset's code)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[object, tuple[str, dict[str, object]]]:
        return exec, (self.source, {})


def test_a_hostile_snapshot_runs_with_a_copy_s_rights_only(crowded: KernelTemplate) -> None:
    """A snapshot whose unpickling tries what only root or ``CAP_SETUID`` could do: become root or a sibling's
    uid, read or kill a sibling, write the template's folder or replace its owner record (which the reaper
    trusts). Its copies load it themselves, under their own uid: every attempt fails, and the sibling and the
    template go on."""
    import hashlib
    import pickle

    from themisto_env.sandbox.lifetime.owners import OWNER_FILE

    sibling = crowded.kernel()
    copy = None
    try:
        secret = _value(
            sibling, "import json, os; open('secret', 'w').write('b'); print(json.dumps(os.path.abspath('secret')))"
        )
        source = SNAPSHOT_ATTACK
        for name, value in {
            "SIBLING_UID": _identity(sibling),
            "SIBLING_FILE": json.dumps(secret),
            "SIBLING_PID": _pid(sibling),
            "TEMPLATE_DIR": json.dumps(str(crowded.run_dir)),
            "OWNER_RECORD": json.dumps(str(crowded.run_dir / OWNER_FILE)),
        }.items():
            source = source.replace(name, str(value))
        data = pickle.dumps({"attack": _Unpickled(source), "x": 41})
        digest = hashlib.sha256(data).hexdigest()
        crowded.store.add(digest, data)
        owner_before = (crowded.run_dir / OWNER_FILE).read_bytes()
        [copy] = crowded.copies(digest, 1)
        assert _value(copy, "print(x + 1)") == 42, "the state did not load"
        results = json.loads((copy.snapshots.workdir / "attack.json").read_text())
        uid = _identity(copy)
        assert results.pop("uid") == [uid] * 3, "the snapshot was not loaded by the copy, under its own uid"
        assert results and not [name for name, outcome in results.items() if outcome == "done"], results
        assert not (crowded.run_dir / "pwned").exists()
        assert (crowded.run_dir / OWNER_FILE).read_bytes() == owner_before
        assert _alive_and_answering(sibling)
        assert _value(sibling, "import json; print(json.dumps(open('secret').read() == 'b'))") is True
        assert crowded.is_alive()
    finally:
        sibling.close()
        if copy is not None:
            copy.close()


# -- a copy's memory allowance: what it may allocate beyond its size at its first cell -----------------------

#: How far short of its allowance a copy's allocation may fall and still have to succeed (measured: a 512 MiB
#: copy allocates 508 MiB in its first cell; the cell's own objects take the rest).
MARGIN_MB = 16


@pytest.mark.parametrize(
    ("megabytes", "fits"), [(LIMITS.memory_mb - MARGIN_MB, True), (LIMITS.memory_mb + MARGIN_MB, False)]
)
def test_a_copy_allocates_its_memory_allowance_less_a_small_margin(
    template: KernelTemplate, megabytes: int, fits: bool
) -> None:
    """``memory_mb`` is what a copy's code may allocate, counted from its size at its first cell (its kernel
    started, its state restored): its own kernel's threads and heap are not taken from it. Just below it
    succeeds; just above it is the copy's own memory failure, scored as the model's."""
    kernel = template.kernel()
    try:
        run = _run_code(kernel, f"_mine = bytearray({megabytes} * 2**20)\nprint(len(_mine) >> 20)")
        text = json.dumps(run.outputs)
        if fits:
            assert run.status == "ok", run
            assert "".join(o.get("text", "") for o in run.outputs).strip() == str(megabytes)
        else:  # refused outright (a MemoryError the code raised), or named a memory failure: the model's either way
            assert (run.status == "error" and "MemoryError" in text) or run.failure == "memory", run
            assert _alive_and_answering(kernel), "a copy refused its allocation was killed, not refused"
    finally:
        kernel.close()


def test_a_copy_cannot_raise_its_memory_allowance(template: KernelTemplate) -> None:
    """The allowance is a hard limit once the first cell starts: code cannot lift it."""
    kernel = template.kernel()
    try:
        code = "import resource\nresource.setrlimit(resource.RLIMIT_DATA, (2**40, 2**40))"
        result = kernel.execute(code, timeout_s=30)
        assert result.status == "error" and "not allowed to raise maximum limit" in result.text(), result.outputs
    finally:
        kernel.close()
