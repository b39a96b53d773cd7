"""Spares of a state: kernels forked ahead for the copies a group or a session asks for next.

What a spare promises: handed out, it is a kernel in its state (the same fingerprint as a started kernel
that restored the snapshot), of that state only, alive (a killed one is passed over), in use at the priority
of any kernel; spares go with their template. Real templates and forked ipykernels; each test ends only what
it started.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import wait_for
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.forked import exited
from themisto_env.sandbox.template import states as states_module
from themisto_env.sandbox.template.core import KernelTemplate


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelTemplate]:
    store = tmp_path_factory.mktemp("spares-store")
    with KernelTemplate("local", preload=("numpy",), snapshot_dir=store) as template:
        yield template


def _snapshot(template: KernelTemplate, code: str) -> tuple[str, dict[str, str]]:
    with Kernel("local", snapshot_dir=template.store.root) as kernel:
        assert kernel.execute(code).status == "ok"
        return kernel.snapshots.save().digest, kernel.introspect.fingerprint()


@pytest.fixture(scope="module")
def states(template: KernelTemplate) -> dict[str, tuple[str, dict[str, str]]]:
    """Two snapshots that differ in one value, and each writer's fingerprint."""
    code = "import numpy as np\nweights = np.arange(12.0).reshape(3, 4)\nlabel = {!r}\n"
    return {name: _snapshot(template, code.format(name)) for name in ("first", "second")}


def _ready(state: KernelTemplate, n: int) -> bool:
    return wait_for(lambda: len(state._spares) >= n, seconds=60)


def test_a_spare_handed_out_is_in_its_state_as_a_restore_is(
    template: KernelTemplate, states: dict[str, tuple[str, dict[str, str]]]
) -> None:
    digest, written = states["first"]
    state = template.state(digest)
    with state.expecting(3):
        assert _ready(state, 3), "the announced copies were not forked ahead"
        handed = [state.kernel() for _ in range(3)]
    try:
        with Kernel("local", snapshot_dir=template.store.root) as restored:
            reference = restored.snapshots.restore(digest).fingerprint
        for kernel in handed:
            assert kernel.introspect.fingerprint() == reference == written
            assert kernel.execute("label").text() == "'first'"
        assert len({kernel.launcher.pid() for kernel in handed}) == 3, "one process handed out twice"
    finally:
        for kernel in handed:
            kernel.close()


def test_a_spare_of_one_state_is_never_handed_out_for_another(
    template: KernelTemplate, states: dict[str, tuple[str, dict[str, str]]]
) -> None:
    first, second = template.state(states["first"][0]), template.state(states["second"][0])
    with first.expecting(2), second.expecting(2):
        assert _ready(first, 2) and _ready(second, 2)
        mine = [second.kernel(), first.kernel(), second.kernel(), first.kernel()]
    try:
        labels = [kernel.execute("label").text() for kernel in mine]
        assert labels == ["'second'", "'first'", "'second'", "'first'"]
        assert mine[0].introspect.fingerprint() == states["second"][1]
    finally:
        for kernel in mine:
            kernel.close()


def test_a_killed_spare_is_passed_over_and_replaced(
    template: KernelTemplate, states: dict[str, tuple[str, dict[str, str]]]
) -> None:
    state = template.state(states["first"][0])
    with state.expecting(2):
        assert _ready(state, 2)
        victims = list(state._spares)
        pids = [kernel.launcher.pid() for kernel in victims]
        for pid in pids:
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: not any(kernel.is_alive() for kernel in victims), seconds=10)
        with state.kernel() as kernel:
            assert kernel.launcher.pid() not in pids
            assert kernel.execute("label").text() == "'first'"
    assert not any(kernel in state._spares for kernel in victims), "a dead spare was kept"
    assert not any(kernel._process.started for kernel in victims), "a dead spare was dropped, not closed"


def test_spares_go_with_their_template(tmp_path_factory: pytest.TempPathFactory) -> None:
    store = tmp_path_factory.mktemp("spares-close")
    watched: list[int] = []
    try:
        with KernelTemplate("local", snapshot_dir=store) as template:
            digest, _ = _snapshot(template, "x = 1\n")
            state = template.state(digest)
            with state.expecting(2):
                template.kernel().close()  # the template keeps a spare of its own from here on
                assert _ready(state, 2) and _ready(template, 1)
                # our own handles on the spares' processes: closing the template drops the launchers'
                watched = [os.dup(kernel.launcher._pidfd) for kernel in [*state._spares, *template._spares]]
        assert len(watched) == 3
        assert wait_for(lambda: all(exited(pidfd) for pidfd in watched), seconds=10), "a spare outlived its template"
        assert state._spares == [] and template._spares == []
    finally:
        for pidfd in watched:
            os.close(pidfd)


def test_copies_announced_and_left_over_are_closed_at_the_end_of_the_block(
    template: KernelTemplate, states: dict[str, tuple[str, dict[str, str]]]
) -> None:
    state = template.state(states["first"][0])
    with state.expecting(4):
        assert _ready(state, 4)
        with state.kernel() as kernel:
            assert kernel.execute("label").text() == "'first'"
        leftover = list(state._spares)
    assert len(state._spares) <= state.spares
    closed = [kernel for kernel in leftover if kernel not in state._spares]
    assert len(closed) >= 3 - state.spares and not any(kernel.is_alive() for kernel in closed)


def test_prepare_has_one_spare_ready_for_the_next_ask(
    template: KernelTemplate, states: dict[str, tuple[str, dict[str, str]]]
) -> None:
    state = template.state(states["second"][0])
    state.trim()  # no spare kept from the tests before
    state.prepare()
    assert _ready(state, 1)
    spare = state._spares[0]
    with state.kernel() as kernel:
        assert kernel is spare and kernel.execute("label").text() == "'second'"


#: What a user can see of a kernel's cells so far: its count, IPython's input and output history and their
#: variables, the history database, and the display machinery a first cell builds.
FIRST_CELL_PROBE = (
    "ip = get_ipython(); "
    "(ip.execution_count, In, Out, _ih, _oh, _i, _ii, _iii, _i1, _, __, ___, "
    "sorted(n for n in globals() if n.startswith('_') and n.lstrip('_i').isdigit()), "
    "list(ip.history_manager.get_range(output=True)), sorted(ip.display_formatter.formatters), "
    "ip.displayhook.prompt_count, ip.logger.log_active)"
)


def test_a_spare_warmed_while_it_waited_shows_a_first_cell_as_a_restored_kernel_does(
    template: KernelTemplate, states: dict[str, tuple[str, dict[str, str]]]
) -> None:
    """A spare runs the pure parts of a cell before it answers (formatting, parsing, signing), so that its
    first cell costs what a later one does: its user still finds a kernel that ran no cell. Its first cell's
    count, outputs and history, and the state's fingerprint, are those of a started kernel that restored the
    same snapshot; and it sent nothing before its first cell."""
    digest, written = states["first"]
    state = template.state(digest)
    with state.expecting(1):
        assert _ready(state, 1)
        spare = state._spares[0]
        kernel = state.kernel()
    assert kernel is spare
    with kernel, Kernel("local", snapshot_dir=template.store.root) as restored:
        restored.snapshots.restore(digest)
        assert kernel.introspect.fingerprint() == restored.introspect.fingerprint() == written
        answers = []
        for each in (kernel, restored):
            first = each.execute("1 + 1")
            assert first.execution_count == 1 and first.text() == "2", first
            assert [output["output_type"] for output in first.outputs] == ["execute_result"], first.outputs
            answers.append(each.execute(FIRST_CELL_PROBE).text())
        assert answers[0] == answers[1]
        assert "'1 + 1'" in answers[0]  # the probe saw the first cell


def test_a_copys_printers_follow_what_its_own_code_imported(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The warm-up builds IPython's formatters in the template, but leaves to the copy's first output the
    printer tables whose content depends on what is loaded when they are built (a `numpy.float64` printer
    exists only if numpy was): `%precision` applies to the numpy floats of a copy whose template had no numpy,
    as in a kernel not forked. (Built in the template, the table had no numpy printer.)"""
    store = tmp_path_factory.mktemp("printers-store")
    with KernelTemplate("local", snapshot_dir=store, spares=1) as template, template.kernel() as copy:
        assert copy.execute("import sys; print('numpy' in sys.modules)").text().strip() == "False", "no test"
        result = copy.execute("import numpy as np\n%precision 2\nnp.float64(1.23456)")
        assert result.text().strip() == "1.23", result.outputs


def test_a_trim_while_a_state_forks_its_spare_ends_the_state_and_the_spare(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The last env closing trims the templates: a state template forking a spare at that moment (right after
    its second copy) is not in use, and goes with its spare and its folder."""
    store = tmp_path_factory.mktemp("trim-store")
    with KernelTemplate("local", preload=("numpy",), snapshot_dir=store) as template:
        digest, _ = _snapshot(template, "label = 'trimmed'\n")
        state = template.state(digest)
        first = state.kernel()
        fork, forked = state._fork_kernel, threading.Event()

        def slow_fork(*args: object) -> Kernel:  # the spare: forked, not yet a spare, when the trim comes
            kernel = fork(*args)
            forked.set()
            time.sleep(1.0)
            return kernel

        state._fork_kernel = slow_fork  # type: ignore[method-assign]
        second = state.kernel()  # forks a spare in the background after it
        folder = state.run_dir
        first.close(graceful=False)
        second.close(graceful=False)
        assert forked.wait(timeout=30) and state._forking == 1, "no spare was being forked"
        template.trim()
        assert wait_for(lambda: not state.is_alive(), seconds=10), "the state template outlived the trim"
        assert state._spares == [] and not any(kernel.is_alive() for kernel in list(state._forked))
        assert not folder.exists(), "the state template's folder outlived it"
        assert not template.worth_forking(digest), "the next copy of the state loads it again"


def test_a_trim_ends_a_state_pushed_out_of_the_cache_while_its_copy_ran(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state template pushed out of the cache while a copy of it was open is kept for that copy; once the copy
    is closed, the last holder's trim ends it too (no other state is asked for to sweep it)."""
    monkeypatch.setattr(states_module, "STATE_TEMPLATES", 1)
    store = tmp_path_factory.mktemp("retired-store")
    with KernelTemplate("local", snapshot_dir=store) as template:
        old, _ = _snapshot(template, "label = 'old'\n")
        new, _ = _snapshot(template, "label = 'new'\n")
        retired = template.state(old)
        copy = retired.kernel()
        with template.state(new).kernel():  # pushes the old state out while its copy is open
            assert retired.is_alive() and not template.worth_forking(old)
        folder = retired.run_dir
        copy.close(graceful=False)
        template.trim()
        assert wait_for(lambda: not retired.is_alive(), seconds=10), "the retired state template outlived the trim"
        assert not folder.exists() and template.live_states() == 0
