"""Hostile predictions under the execution score, on docker and bwrap: each is contained and scored as documented.

Every case runs on each path that runs model-written code in isolation: on docker, disposable kernels started
one container each (``fork=False``) and copies forked in one template container, each with a uid of its own
(the default); on bwrap, copies forked in one template sandbox, each in namespaces of its own (the default; as
an unprivileged user: ``scripts/setup-bwrap-user.sh``). bwrap's started kernels are not among them: a bwrap
sandbox enforces no memory or process limit (docs/sandboxes.md), so its forked copies, which do, are what
model-written code runs on there.

Every case plays the same pattern on one env (two predictions per sample): at sample S the hostile
prediction H, then the true target (another completion of S); at S+1 the true target and an empty
prediction. The same pattern with the target in place of H is the clean reference. For each H:

* H's score is as documented (`themisto_env.scoring.execution`): a failure of its own scores 0 with its reason,
  never an infrastructure error; code that does not fail scores what its effects are, never more than
  the target's;
* nothing H did reaches the other completion of S, the state S+1 is served in (the env's own kernel is
  checked against the recording, and its tool answers against the clean run) or S+1's scores;
* nothing is left running: no container of this process beyond those the env holds (docker), no child
  process of H on the host.

Last, [`ExecutionReward`][themisto_env.bridges.rl.ExecutionReward] over a batch of hostile and honest completions equals
each completion scored alone.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_backend
from themisto_env.bridges.rl import ExecutionReward
from themisto_env.bridges.rl.export import export_samples
from themisto_env.data.samples import SampleRule
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall, run_tool
from themisto_env.sandbox.rendering import render_outputs
from themisto_env.sandbox.template import shared as templates
from themisto_env.state.check import diff_fingerprints, expected_fingerprint
from themisto_env.state.copies import FAILURES, CodeRun

#: Small enough that the memory bomb and the fork bomb hit quickly; a 5 s limit per prediction.
LIMITS = {"memory_mb": 512, "pids": 64, "timeout_s": 5}
ALL_SAMPLES = SampleRule(max_length_quantile=None).model_dump()
#: What is compared between a run and the clean run, per scored prediction.
KEYS = ("execution_score", "execution", "prediction_failed", "scores", "infrastructure_error", "state_mismatch")
#: A unique sleep duration: the command line of a child process this session's hostile code starts.
SLEEP = f"600.{secrets.randbelow(10**6):06d}"
TOKEN = secrets.token_hex(6)
#: Object addresses in reprs (a restored function or generator is a new object each time).
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

# -- the hostile code (TARGET is replaced by the sample's true target) ---------------------------------------

#: A change the target does not make (a new column: the target's groupby is unaffected).
MISCHIEF = "sales['hostile'] = 0\n"
HELPER = "import sys as _sys\n_h = _sys.modules['_themisto_helper']\n"

THREAD_ONCE = """import threading, time
def _later():
    time.sleep(0.5)
    sales['units'] = 0
    sales.drop(columns='region', inplace=True)
threading.Thread(target=_later, daemon=True).start()
TARGET"""

THREAD_FOREVER = """import threading
def _forever():
    while True:
        sales['units'] += 1
threading.Thread(target=_forever, daemon=True).start()
TARGET"""

#: Deterministic (measured well within its 0.5 s), unlike THREAD_FOREVER: a display option and, once the
#: cell returned, a thread that mutates ``sales`` without end.
LATER = """import threading as _threading, time as _time
def _later():
    _time.sleep(0.5)
    while True:
        sales['units'] += 1
_threading.Thread(target=_later, daemon=True).start()
pd.set_option('display.precision', 1)
TARGET"""

OPTIONS = """pd.set_option('display.max_rows', 3)
pd.set_option('display.precision', 1)
np.set_printoptions(precision=1)
TARGET"""

CHILD = f"""import subprocess
_child = subprocess.Popen(['sleep', '{SLEEP}'])
TARGET"""

DAEMON = f"""import os as _os
if _os.fork() == 0:
    _os.setsid()
    if _os.fork() == 0:
        _os.execvp('sleep', ['sleep', '{SLEEP}'])
    _os._exit(0)
_os.wait()
TARGET"""

BUILTINS_LEN = "import builtins\nbuiltins.len = lambda x: 0\nTARGET"

#: ``__import__`` answers the measuring expression (``__import__('sys').modules[...]``) with a fake helper.
IMPORT_HIJACK = f"""import builtins as _b, json as _json, types as _types
_real_import = _b.__import__
_frozen = _json.dumps({{"ok": {{}}}})
class _Sealed(dict):
    def __missing__(self, key):
        return {{"call": lambda *a: _frozen}}
_fake = _types.SimpleNamespace(SEALED=_Sealed(), call=lambda *a: _frozen)
_real_sys = _real_import("sys")
class _FakeSys:
    def __getattr__(self, name):
        if name == "modules":
            return {{**_real_sys.modules, "_themisto_helper": _fake}}
        return getattr(_real_sys, name)
def _import(name, *args, **kwargs):
    return _FakeSys() if name == "sys" else _real_import(name, *args, **kwargs)
_b.__import__ = _import
{MISCHIEF}TARGET"""

#: The unsealed helper patched: the measurement does not use it.
HELPER_PATCH = (
    HELPER + "_h.namespace_fingerprint = lambda: {}\n_h.call = lambda *a: '{\"ok\": {}}'\n" + MISCHIEF + "TARGET"
)

#: Mutates a variable and freezes every sealed copy's answer to the state before: canaries catch it.
FREEZE = (
    HELPER
    + """import json as _json
_frozen = _json.dumps({'ok': _h.namespace_fingerprint()})
for _p in _h.SEALED.values():
    _p['call'] = lambda *a, _f=_frozen: _f
"""
    + MISCHIEF
    + "TARGET"
)

#: Wraps every sealed copy: the real answer (canaries and all), with the change to ``sales`` hidden.
HIDE = (
    HELPER
    + """import json as _json
_before = _h.namespace_fingerprint()
for _p in _h.SEALED.values():
    def _lie(name, kw='{}', _real=_p['call']):
        _fp = _json.loads(_real(name, kw))['ok']
        _fp['sales'] = _before['sales']
        return _json.dumps({'ok': _fp})
    _p['call'] = _lie
"""
    + MISCHIEF
    + "TARGET"
)

#: The first sample's cell with wrong data (``sales`` of the right type and shape, other values).
WRONG_DATA = """rng = np.random.default_rng(1)
sales = pd.DataFrame({'region': ['x'] * 20, 'units': [0] * 20})"""

#: The same wrong data, and the sealed answer with every content hash dropped (type and shape kept), but
#: the canaries' (it cannot know them, so it keeps the real answer's).
STRIP = (
    HELPER
    + """import json as _json
for _p in _h.SEALED.values():
    def _lie(name, kw='{}', _real=_p['call']):
        _fp = _json.loads(_real(name, kw))['ok']
        _fp = {k: v if k.startswith('canary_') else v.rsplit('|', 1)[0] + '|' for k, v in _fp.items()}
        return _json.dumps({'ok': _fp})
    _p['call'] = _lie
"""
    + WRONG_DATA
)

STDOUT = """import sys as _sys, io as _io
_sys.stdout = _io.StringIO()
_sys.stderr = _io.StringIO()
print('HIDDEN-TEXT')
TARGET"""

#: Writes a file in every directory it may write, then in the host's dataset and snapshot store (by
#: their host paths), and tries to forge its run directory's owner record (which a root reaper trusts).
#: MOUNTS_ONLY: it walks only the read-write mounts (a folder elsewhere cannot be written) instead of the
#: whole tree (a bwrap sandbox sees the host's, too large to walk within the time limit).
WRITES = """import json as _json, os as _os
_result = {'written': [], 'refused': {}}
def _attempt(_folder):
    try:
        with open(_os.path.join(_folder, 'hostile-TOKEN'), 'w') as _f:
            _f.write('x')
        _result['written'].append(_folder)
    except OSError as _e:
        _result['refused'][_folder] = type(_e).__name__
_roots = ['/']
if MOUNTS_ONLY:
    with open('/proc/self/mountinfo') as _f:
        _mounts = [_line.split() for _line in _f]
    _roots = sorted(_m[4] for _m in _mounts if 'rw' in _m[5].split(',') and _m[4].split('/')[1] not in ('proc', 'sys'))
_walked = set()
for _top in _roots:
    for _root, _dirs, _files in _os.walk(_top):
        if _root in ('/proc', '/sys') or _root in _walked:
            _dirs[:] = []
            continue
        _walked.add(_root)
        if _os.access(_root, _os.W_OK):
            _attempt(_root)
for _p in HOST_PATHS:
    _attempt(_p)
_run = _os.path.dirname(_os.getcwd())
_result['run_dir'] = _run
try:
    with open(_os.path.join(_run, 'owner.json')) as _f:
        _owner = _json.load(_f)
    _owner['processes'].append({'pid': 1, 'start': '1'})
    with open(_os.path.join(_run, '.forged'), 'w') as _f:
        _json.dump(_owner, _f)
    _os.replace(_os.path.join(_run, '.forged'), _os.path.join(_run, 'owner.json'))
    _result['owner'] = 'forged'
except OSError as _e:
    _result['owner'] = type(_e).__name__
print('RESULT', _json.dumps(_result))
"""

#: Reads host files by their host paths, and looks for any snapshot file it can see under SEARCH_ROOTS.
READS = """import json as _json, os as _os
_result = {}
for _p in HOST_PATHS:
    try:
        if _os.path.isdir(_p):
            _result[_p] = 'listed %d' % len(_os.listdir(_p))
        else:
            with open(_p, 'rb') as _f:
                _result[_p] = 'read %d' % len(_f.read())
    except OSError as _e:
        _result[_p] = type(_e).__name__
_dill = []
for _top in SEARCH_ROOTS:
    for _root, _dirs, _files in _os.walk(_top):
        if _root in ('/proc', '/sys'):
            _dirs[:] = []
            continue
        _dill += [_os.path.join(_root, _f) for _f in _files if _f.endswith('.dill')]
print('RESULT', _json.dumps({'paths': _result, 'snapshots': _dill}))
"""


# -- the harness -------------------------------------------------------------------------------------------


def _containers() -> set[str]:
    """Names of the kernel containers this process created (started or not)."""
    import docker

    client = docker.from_env()
    labels = ["themisto-env.kernel=1", f"themisto-env.host-pid={os.getpid()}"]
    return {c.name for c in client.containers.list(all=True, filters={"label": labels}, ignore_removed=True)}


def _sleepers() -> list[int]:
    """Host pids of the child processes the hostile code started (the container's processes are visible
    here when the engine runs on this machine)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if SLEEP.encode() in cmdline:
                found.append(int(entry.name))
    return found


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _result(run: CodeRun) -> dict[str, Any]:
    """The ``RESULT {...}`` line the hostile code printed."""
    text = render_outputs(run.outputs)
    line = next((line for line in text.splitlines() if line.startswith("RESULT ")), None)
    assert line is not None, text
    return dict(json.loads(line.removeprefix("RESULT ")))


@dataclass
class Outcome:
    """One play of the pattern: H at S, the target at S (another completion), then S+1."""

    hostile: dict[str, Any]  # H's info (the keys of KEYS)
    run: CodeRun  # what H did in its disposable kernel
    again: dict[str, Any]  # the true target at S, right after H
    served: dict[str, Any]  # the state S+1 was served in, as the agent sees it
    next_target: dict[str, Any]  # the true target at S+1
    next_empty: dict[str, Any]  # an empty prediction at S+1


def _on_isolated_copy(kernel: Any) -> bool:
    """Whether a kernel is a forked copy isolated from its siblings: a uid of its own (docker) or namespaces
    of its own (bwrap)."""
    launcher = kernel.launcher
    return getattr(launcher, "identity", None) is not None or bool(getattr(launcher, "own_namespaces", False))


class Harness:
    """An env with the execution score (two predictions per sample) that records each CodeRun."""

    def __init__(self, env: ThemistoEnv, *, backend: str, forked: bool) -> None:
        self.env = env
        self.backend = backend
        self.forked = forked
        self.runs: list[CodeRun] = []
        kernels = env.episode.scorer.disposable_kernels()
        run, run_code = kernels.run, kernels._run_code
        #: Each run's kernel: whether it was an isolated copy (a uid or namespaces of its own)
        self.isolated_copy: list[bool] = []

        def noting(kernel: Any, *args: Any, **kwargs: Any) -> CodeRun:
            self.isolated_copy.append(_on_isolated_copy(kernel))
            return run_code(kernel, *args, **kwargs)

        kernels._run_code = noting  # type: ignore[method-assign]

        def recording(*args: Any, **kwargs: Any) -> CodeRun:
            result = run(*args, **kwargs)
            self.runs.append(result)
            return result

        kernels.run = recording  # type: ignore[method-assign]
        self._cache: dict[str, Outcome] = {}

    def index(self, prefix: str) -> int:
        """The index (in its trajectory) of the sample whose target starts with ``prefix``."""
        samples = self.env.episode.episode_samples[self.env.episode.episode_ids[0]]
        return next(i for i, s in enumerate(samples) if s.target.startswith(prefix))

    def _predict(self, code: str) -> tuple[dict[str, Any], CodeRun]:
        before = len(self.runs)
        *_, info = self.env.step(Prediction(text=code))
        assert len(self.runs) == before + 1, "the prediction was not run"
        return {k: info.get(k) for k in KEYS}, self.runs[-1]

    def _served(self) -> dict[str, Any]:
        """The env's own kernel at the current sample: its fingerprint against the recording, and what
        the tools answer (display options would show in them)."""
        sample, env = self.env.episode.current_sample, self.env
        assert sample is not None
        context = env.episode.tool_context()
        live = context.kernel.introspect.fingerprint()
        recorded = expected_fingerprint(env.episode.trajectories[sample.trajectory_id], sample.step)
        assert recorded is not None
        names = sorted(n for n, fp in live.items() if not fp.startswith("module|") and not n.startswith("<"))
        calls = [ToolCall(tool="list_variables"), ToolCall(tool="dataframe_describe", args={"name": "sales"})]
        calls += [ToolCall(tool="inspect_variable", args={"name": name}) for name in names]
        return {
            "fingerprint": live,
            "differences": diff_fingerprints(recorded, live),
            "answers": {f"{c.tool} {c.args}": ADDRESS.sub("", run_tool(c, context).text) for c in calls},
        }

    def play(self, index: int, code: str) -> Outcome:
        """H at sample ``index`` (TARGET in ``code`` is its true target), then the rest of the pattern;
        checks that nothing H started is left running."""
        env = self.env
        env.reset(options={"trajectory": 0, "sample": index})
        sample = env.episode.current_sample
        assert sample is not None
        before_s = self._served()
        hostile, run = self._predict(code.replace("TARGET", sample.target))
        assert env.episode.current_sample == sample, "the second prediction of S is still to come"
        after_s = self._served()
        assert after_s == before_s, "H reached the env's own kernel"
        assert not after_s["differences"], after_s["differences"]
        again, _ = self._predict(sample.target)
        following = env.episode.current_sample
        assert following is not None and following.step > sample.step
        served = self._served()
        next_target, _ = self._predict(following.target)
        next_empty, _ = self._predict("")
        self.assert_nothing_left()
        assert self.isolated_copy[-3:] == [self.forked] * 3, "the code ran elsewhere than on the path under test"
        return Outcome(hostile, run, again, served, next_target, next_empty)

    def outcome(self, name: str, prefix: str, code: str) -> Outcome:
        """`play` once per case (tests that check different things of one case share it)."""
        if name not in self._cache:
            self._cache[name] = self.play(self.index(prefix), code)
        return self._cache[name]

    def clean(self, prefix: str) -> Outcome:
        return self.outcome(f"clean {prefix}", prefix, "TARGET")

    def target(self, prefix: str) -> str:
        return self.env.episode.episode_samples[self.env.episode.episode_ids[0]][self.index(prefix)].target

    def alone(self, prefix: str, code: str) -> dict[str, Any]:
        """One prediction at a fresh episode's sample (its first draw), for comparisons."""
        self.env.reset(options={"trajectory": 0, "sample": self.index(prefix)})
        return self._predict(code)[0]

    def held(self) -> set[str]:
        """The containers the env holds now (its own kernel, the ready kernels of the disposable pool and
        of the env's warm pool), once discarded kernels are gone and the pools have refilled."""
        kernels = self.env.episode.scorer.disposable_kernels()
        warm = self.env.episode.server.pool
        for thread in [*kernels._closing, *kernels.pool._threads, *(warm._threads if warm else [])]:
            thread.join(timeout=60)
        kernels_held = [self.env.episode.tool_context().kernel, *kernels.pool._ready, *(warm._ready if warm else [])]
        held = {getattr(kernel.launcher, "container_name", None) for kernel in kernels_held}
        return held | _template_containers()

    def assert_nothing_left(self) -> None:
        if self.backend == "docker":
            held = self.held()
            assert _containers() - BASELINE == held, "a container of a discarded kernel is left"
        else:  # what the closing discarded kernels took along
            for thread in self.env.episode.scorer.disposable_kernels()._closing:
                thread.join(timeout=60)
        assert not _sleepers(), "a child process of a prediction outlived its kernel"


BASELINE: set[str] = set()


def _template_containers() -> set[str]:
    """The containers of the process's shared docker templates (the forked copies' only containers)."""
    return {
        str(t._process.container_name)
        for t in templates._SHARED.values()
        if t.backend == "docker" and t._process is not None
    }


#: The paths under test: (backend, forked).
PATHS = [
    pytest.param(("docker", False), marks=pytest.mark.docker, id="docker-started"),
    pytest.param(("docker", True), marks=pytest.mark.docker, id="docker-forked"),
    pytest.param(("bwrap", True), marks=pytest.mark.bwrap, id="bwrap-forked"),
]


@pytest.fixture(scope="module", params=PATHS)
def harness(request: pytest.FixtureRequest, env_dataset: dict[str, str]) -> Iterator[Harness]:
    backend, forked = request.param
    require_backend(backend)  # the param's mark skips it where the backend cannot run: this says why
    if backend == "docker":
        BASELINE.update(_containers())
    store, dataset = Path(env_dataset["snapshot_dir"]), Path(env_dataset["dataset"])
    listings = _listing(store), _listing(dataset)
    env = ThemistoEnv(
        **env_dataset,
        backend=backend,
        task="next-cell",
        observation="tools",
        execution_score=True,
        attempts=2,
        sample_rule=ALL_SAMPLES,
        limits=LIMITS,
        fork=forked,
    )
    try:
        yield Harness(env, backend=backend, forked=forked)
    finally:
        env.close()
        templates.close_shared_templates()
    if backend == "docker":
        assert _containers() - BASELINE == set(), "containers left after the env closed"
    assert not _sleepers()
    assert (_listing(store), _listing(dataset)) == listings, "the store or the dataset changed"


def assert_isolated(outcome: Outcome, clean: Outcome) -> None:
    """Nothing H did reached the other completion of S, the state of S+1 or S+1's scores; no prediction
    of the pattern met an infrastructure failure."""
    for info in (outcome.hostile, outcome.again, outcome.next_target, outcome.next_empty):
        assert info["infrastructure_error"] is None and info["state_mismatch"] is None, info
    assert outcome.again == clean.again == clean.hostile, "the other completion of S was affected"
    assert not outcome.served["differences"], outcome.served["differences"]
    assert outcome.served == clean.served, "the state of S+1 differs from the clean run's"
    assert outcome.next_target == clean.next_target
    assert outcome.next_empty == clean.next_empty


def assert_failed(info: dict[str, Any], reason: str | None = None) -> None:
    """A failure of the prediction's own: score 0 with its reason (one of FAILURES)."""
    failure = info["prediction_failed"]
    assert failure in FAILURES and (reason is None or failure == reason), info
    assert info["execution_score"] == 0.0
    assert info["execution"] == {"variables": 0.0, "outputs": 0.0, "passed": False, "failure": failure}


def assert_scored(outcome: Outcome, clean: Outcome) -> None:
    """Code that did not fail: scored by its effects (no failure reason), never above the target's score."""
    info = outcome.hostile
    assert info["prediction_failed"] is None and info["execution"]["failure"] is None, info
    assert 0.0 <= info["execution_score"] <= clean.hostile["execution_score"]


TARGET_6 = "by_region"  # step 6: by_region = sales.groupby(...).sum(); by_region (S+1: len(sales))


# -- crashes and limits --------------------------------------------------------------------------------------


def test_clean_reference_passes(harness: Harness) -> None:
    clean = harness.clean(TARGET_6)
    assert clean.hostile["execution_score"] == 1.0 and clean.hostile["execution"]["passed"]
    assert clean.next_target["execution_score"] == 1.0
    assert clean.next_empty["execution_score"] < 1.0


def test_os_exit_is_an_exit(harness: Harness) -> None:
    outcome = harness.outcome("exit", TARGET_6, "import os\nos._exit(1)")
    assert_failed(outcome.hostile, "exit")
    assert_isolated(outcome, harness.clean(TARGET_6))


def test_an_infinite_loop_is_a_timeout(harness: Harness) -> None:
    outcome = harness.outcome("loop", TARGET_6, "while True:\n    pass")
    assert_failed(outcome.hostile, "timeout")
    assert_isolated(outcome, harness.clean(TARGET_6))


def test_a_memory_bomb_is_memory(harness: Harness) -> None:
    code = "_hog = []\nwhile True:\n    _hog.append(b'x' * 2**24)"
    outcome = harness.outcome("memory bomb", TARGET_6, code)
    assert_failed(outcome.hostile, "memory")
    assert_isolated(outcome, harness.clean(TARGET_6))


FORK_BOMB = "import os\nwhile True:\n    os.fork()"


def test_a_fork_bomb_is_contained(harness: Harness) -> None:
    outcome = harness.outcome("fork bomb", TARGET_6, FORK_BOMB)
    assert_failed(outcome.hostile)
    assert_isolated(outcome, harness.clean(TARGET_6))


def test_a_fork_bomb_is_named_processes(harness: Harness) -> None:
    outcome = harness.outcome("fork bomb", TARGET_6, FORK_BOMB)
    assert outcome.hostile["prediction_failed"] == "processes", outcome.run.detail


def test_children_that_stop_at_the_process_limit_are_processes(harness: Harness) -> None:
    """Children that sleep (no memory pressure): the kernel lives, the cgroup says the limit was hit."""
    code = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(600)\n        os._exit(0)"
    outcome = harness.outcome("sleeping forks", TARGET_6, code)
    assert_failed(outcome.hostile, "processes")
    assert_isolated(outcome, harness.clean(TARGET_6))


# -- code that keeps acting after the cell returned -------------------------------------------------------------


def test_a_thread_that_mutates_after_the_cell_returns(harness: Harness) -> None:
    """The measurement is taken as the cell returns: the thread's later change is not scored, and goes
    with the kernel."""
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("thread once", TARGET_6, THREAD_ONCE)
    assert_scored(outcome, clean)
    assert outcome.hostile["execution_score"] < 1.0  # it also imported threading and time
    assert {"by_region", "threading", "time"} <= set(outcome.run.changed or {})
    assert_isolated(outcome, clean)


def test_a_thread_that_mutates_forever(harness: Harness) -> None:
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("thread forever", TARGET_6, THREAD_FOREVER)
    if outcome.hostile["prediction_failed"] is not None:  # the thread may starve the measurement
        assert_failed(outcome.hostile)
    else:
        assert_scored(outcome, clean)
    assert outcome.hostile["execution_score"] < 1.0
    assert_isolated(outcome, clean)


def test_changed_display_options_stay_in_their_kernel(harness: Harness) -> None:
    """At the sample before ``sales.describe()``: S+1's tool answers (the describe of ``sales``, the
    repr of the array ``weights``) are the clean run's, not rounded."""
    clean = harness.clean("weights")
    outcome = harness.outcome("options", "weights", OPTIONS)
    assert_scored(outcome, clean)
    assert "<display options>" in (outcome.run.changed or {}), outcome.run.changed
    assert outcome.hostile["execution_score"] < 1.0
    assert_isolated(outcome, clean)
    answers = outcome.served["answers"]
    assert "0.25" in answers["inspect_variable {'name': 'weights'}"], answers


def test_a_surviving_child_process_goes_with_its_kernel(harness: Harness) -> None:
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("child", TARGET_6, CHILD)  # play() checked: no sleeper, no container left
    assert_scored(outcome, clean)
    assert outcome.hostile["execution_score"] < 1.0  # it bound subprocess
    assert_isolated(outcome, clean)


def test_a_daemonized_grandchild_goes_with_its_kernel(harness: Harness) -> None:
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("daemon", TARGET_6, DAEMON)
    assert_scored(outcome, clean)
    assert outcome.hostile["execution_score"] == clean.hostile["execution_score"]  # _os: no user name
    assert_isolated(outcome, clean)


# -- attacks on the measurement ---------------------------------------------------------------------------------


def test_a_patched_len_fails_the_prediction(harness: Harness) -> None:
    outcome = harness.outcome("len", TARGET_6, BUILTINS_LEN)
    assert_failed(outcome.hostile)  # observed: 'timeout' (IPython itself breaks)
    assert_isolated(outcome, harness.clean(TARGET_6))


def test_an_import_hook_that_fakes_the_helper_is_tampered(harness: Harness) -> None:
    """The measuring expression imports ``sys`` through the user's builtins: a fake answer is caught by
    the canaries."""
    outcome = harness.outcome("import hijack", TARGET_6, IMPORT_HIJACK)
    assert_failed(outcome.hostile, "tampered")
    assert_isolated(outcome, harness.clean(TARGET_6))


def test_a_patched_helper_changes_nothing_of_the_score(harness: Harness) -> None:
    """The measurement runs on the sealed copy: patching the helper module scores as the same code
    without the patch (the mischief is seen)."""
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("helper patch", TARGET_6, HELPER_PATCH)
    honest = harness.alone(TARGET_6, MISCHIEF + harness.target(TARGET_6))
    assert_scored(outcome, clean)
    assert "sales" in (outcome.run.changed or {})
    assert outcome.hostile["execution"] == honest["execution"]
    assert outcome.hostile["execution_score"] == honest["execution_score"] < 1.0
    assert_isolated(outcome, clean)


def test_a_frozen_measurement_after_a_mutation_is_tampered(harness: Harness) -> None:
    outcome = harness.outcome("freeze", TARGET_6, FREEZE)
    assert_failed(outcome.hostile, "tampered")
    assert_isolated(outcome, harness.clean(TARGET_6))


def test_a_lie_that_hides_a_change_gains_no_more_than_the_target(harness: Harness) -> None:
    """Documented limit of the threat model: a lie that keeps the canaries can hide a change the code
    made (here a new column of ``sales``), but scores no more than the target itself."""
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("hide", TARGET_6, HIDE)
    assert_scored(outcome, clean)
    assert "sales" not in (outcome.run.changed or {}), "the hidden change is seen after all: update the docs"
    assert_isolated(outcome, clean)


def test_a_lie_that_drops_content_hashes_gains_nothing(harness: Harness) -> None:
    honest = harness.alone("rng", WRONG_DATA)
    lie = harness.alone("rng", STRIP)
    assert honest["prediction_failed"] is None and honest["execution_score"] < 1.0, honest
    assert lie["execution_score"] <= honest["execution_score"], (lie, honest)


def test_a_replaced_stdout_stays_in_its_kernel(harness: Harness) -> None:
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("stdout", TARGET_6, STDOUT)
    assert_scored(outcome, clean)  # its displayed value is the target's: the same score
    assert "HIDDEN-TEXT" not in render_outputs(outcome.run.outputs)
    assert_isolated(outcome, clean)


# -- the file system -------------------------------------------------------------------------------------------


def test_writes_reach_only_the_kernels_own_scratch_space(harness: Harness, env_dataset: dict[str, str]) -> None:
    """Every directory the code can write is its container's (tmpfs, its run directory, gone with it);
    the host's dataset and snapshot store are not there; its owner record cannot be forged."""
    store, dataset = Path(env_dataset["snapshot_dir"]), Path(env_dataset["dataset"])
    host_paths = [str(store), str(dataset), str(next(store.rglob("*.dill")).parent)]
    code = WRITES.replace("TOKEN", TOKEN).replace("HOST_PATHS", repr(host_paths))
    code = code.replace("MOUNTS_ONLY", repr(harness.backend == "bwrap"))
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("writes", TARGET_6, code)
    assert_scored(outcome, clean)
    result = _result(outcome.run)
    run_dir = result["run_dir"]
    scratch = ("/tmp", "/dev/shm", "/dev/mqueue", run_dir)
    assert result["written"], "nothing was writable: the probe did not run"
    outside = [p for p in result["written"] if not any(p == s or p.startswith(s + "/") for s in scratch)]
    assert not outside, f"wrote outside the container's scratch space: {outside}"
    assert all(p not in result["written"] for p in host_paths), result
    if harness.backend == "docker":
        assert result["owner"] != "forged", "the kernel rewrote the owner record a root reaper trusts"
    # on bwrap no reaper is root: the kernel runs as the user who owns its run directory and runs the reaper,
    # and may rewrite its owner record (docs/sandboxes.md: as a started bwrap kernel may)
    # a started kernel's run directory is in the temporary folder; a forked copy's in its template's
    assert Path(run_dir).is_relative_to(tempfile.gettempdir()) and not Path(run_dir).exists()
    left = [
        str(p)
        for root in (store.parent, dataset.parent, Path(tempfile.gettempdir()))
        for p in root.rglob(f"hostile-{TOKEN}")
    ]
    assert not left, f"files of the prediction on the host: {left}"
    assert_isolated(outcome, clean)


def test_host_files_cannot_be_read(harness: Harness, env_dataset: dict[str, str]) -> None:
    """The host's files: none on docker. On bwrap the sandbox sees the host read-only, as any bwrap kernel
    (docs/sandboxes.md): there the env's store, its snapshots and the test's dataset (in the host's temporary
    folder, which a copy's own /tmp covers) are out of reach, and no snapshot is seen under any of them."""
    store, dataset = Path(env_dataset["snapshot_dir"]), Path(env_dataset["dataset"])
    snapshot = next(store.rglob("*.dill"))
    host_paths = ["/etc/shadow", "/root", str(dataset), str(dataset / "trajectories.jsonl"), str(store), str(snapshot)]
    # docker: the whole tree; bwrap: the folders of the env's own data (the rest of the host is readable there)
    roots = ["/"] if harness.backend == "docker" else sorted({"/tmp", str(store), str(store.parent), str(dataset)})
    code = READS.replace("HOST_PATHS", repr(host_paths)).replace("SEARCH_ROOTS", repr(roots))
    clean = harness.clean(TARGET_6)
    outcome = harness.outcome("reads", TARGET_6, code)
    assert_scored(outcome, clean)
    result = _result(outcome.run)
    assert set(result["paths"]) == set(host_paths)
    covered = harness.backend == "bwrap" and result["paths"][str(store)] == "listed 0"  # its empty cover
    read = {p: r for p, r in result["paths"].items() if not r.endswith("Error") and not (covered and p == str(store))}
    assert not read, f"read from inside the sandbox: {read}"
    assert result["snapshots"] == [], "a snapshot is visible to the prediction"
    assert_isolated(outcome, clean)


# -- the RL reward ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "fork"),
    [("docker", False), ("docker", True), ("bwrap", True)],
    ids=["docker-started", "docker-forked", "bwrap-forked"],
)
def test_execution_reward_over_a_batch_equals_each_completion_alone(
    env_dataset: dict[str, str], backend: str, fork: bool
) -> None:
    require_backend(backend)
    templates.close_shared_templates()  # a harness's (replaced when next used): this reward makes its own
    baseline = _containers() if backend == "docker" else set()
    rows = export_samples("next-cell", "static", **env_dataset, sample_rule=ALL_SAMPLES)
    row = next(r for r in rows if r["target"].startswith(TARGET_6))
    target = row["target"]
    completions = [
        "by_region = sales['units'].sum()",  # wrong
        FREEZE.replace("TARGET", target),  # a hack: tampered
        target,  # right
        LATER.replace("TARGET", target),  # a hack that would spoil what runs after it in a shared kernel
        "",
    ]
    options = {**env_dataset, "backend": backend, "limits": LIMITS, "sample_rule": ALL_SAMPLES, "parse": False}
    options["fork"] = fork
    # The execution score alone (the reward adds the text metrics, which a hack quoting the target earns)
    with ExecutionReward(value="execution_score", **options) as reward:
        batch = reward(completions=completions, sample_id=[row["sample_id"]] * len(completions))
        # a forked reward's template: while the reward is open
        templates_made = (  # (the env's own template, not model code's, may run too: not counted)
            _template_containers() - baseline
            if backend == "docker"
            else {spec for spec in templates._SHARED if spec.store_access == "copy"}
        )
    alone = []
    for completion in completions:
        with ExecutionReward(value="execution_score", **options) as reward:
            alone += reward(completions=[completion], sample_id=[row["sample_id"]])
    assert len(batch) == len(alone) == len(completions)
    assert all(a is not None and b is not None and abs(a - b) <= 1e-9 for a, b in zip(batch, alone, strict=True)), (
        batch,
        alone,
    )
    assert batch[2] == 1.0 and batch[1] == 0.0
    assert max(batch[0], batch[3], batch[4]) < 1.0
    assert bool(templates_made) == fork, "the completions were not run on the path under test"
    # the shared template goes with its last holder (this module's harness env may still hold it)
    templates.close_shared_templates()
    if backend == "docker":
        assert _containers() - baseline == set(), "containers left after the rewards and the templates closed"
    assert not _sleepers()
