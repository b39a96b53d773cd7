"""Shared fixtures: backend gating, a kernel per test, and a check that nothing is left running.

What a test needs is said by the fixtures it uses, and the markers follow from them at collection
(:func:`pytest_collection_modifyitems`), so that no test can forget one:

- ``docker``: it uses the Docker engine: a fixture decorated ``@needs("docker")`` (e.g. ``docker_engine``),
  or a ``docker`` parameter of a parametrized backend (``backend``, ``backend_name``);
- ``bwrap``: the same for the bwrap backend (skipped as root: ``scripts/setup-bwrap-user.sh`` runs them);
- ``environments``: it makes or uses a pinned kernel environment (a venv built by pip; ``@needs``);
- ``training``: it runs a TRL training (``@needs``, the ``rl`` extra);
- ``slow``: marked by hand, or measured above :data:`FAST_SECONDS` (:data:`MEASURED_SLOW`).

A test carrying ``docker`` or ``bwrap`` is skipped with the reason where that backend cannot run (in CI,
docker fails instead). Every other test is marked ``fast``: ``python3 -m pytest -m fast -n auto`` is the lane to run
between two edits. ``require_backend`` refuses a test that reaches a backend without its marker.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from themisto_env.errors import BackendUnavailableError
from themisto_env.sandbox.kernel import Kernel
from themisto_env.sandbox.template import close_shared_templates

IN_CI = os.environ.get("CI", "").lower() == "true"
#: Backends whose tests must run here: where one cannot, they fail instead of skipping (docker in CI;
#: scripts/setup-bwrap-user.sh sets ``THEMISTO_REQUIRE_BACKENDS=bwrap``).
REQUIRED_BACKENDS = {b for b in os.environ.get("THEMISTO_REQUIRE_BACKENDS", "").split(",") if b} | (
    {"docker"} if IN_CI else set()
)
BACKENDS = ("local", "bwrap", "docker")
#: What a test may need that a developer's machine may lack or that takes minutes; none of these is fast.
NEEDS = ("docker", "bwrap", "environments", "training", "ray")
#: Parameters naming a kernel backend: their ``docker`` and ``bwrap`` values mark the test.
BACKEND_PARAMETERS = ("backend", "backend_name")

Fixture = TypeVar("Fixture", bound=Callable[..., Any])
#: A test whose call took longer than this in ``python3 -m pytest -m fast --durations=60`` on this 2-core
#: machine, measured under the load of a shared machine (load average about 9: several suites at once; about
#: 2 s on an idle machine), is listed in MEASURED_SLOW.
FAST_SECONDS = 8.0
#: Tests measured above FAST_SECONDS with none of NEEDS (node ids; a parametrized test's id names one case),
#: marked ``slow`` so the fast lane leaves them out (two runs of the lane under load, 2026-11-25 20:40 and 21:22
#: UTC, and one on a quiet machine at 22:16: 850 tests in 7 min 3 s serially, the three above 10 s added);
#: the bundled pass@k run (a 35 s module fixture) takes its three tests along. What each promises stays in
#: the lane on smaller work where a cheaper test checks it (the state rules on the small "faults"
#: trajectory, the metric path of the score cases, one try_cell round trip, the runner on the env tests'
#: samples). Measure again with ``python3 -m pytest -m fast --durations=60`` and move here any test above
#: FAST_SECONDS; an entry that names no test of a collected file is reported (rename it with its test).
MEASURED_SLOW: frozenset[str] = frozenset(
    (
        "tests/agents/test_cache.py::test_two_agent_processes_share_one_cache",
        "tests/rl/test_tool_env.py::test_more_samples_than_kernels_move_the_least_recently_used",
        "tests/rl/test_tool_env.py::test_without_sharing_each_rollout_has_its_own_kernel",
        "tests/rl/test_vector.py::test_tool_calls_and_predictions_in_a_batch[async]",
        "tests/test_api_sequence.py::test_on_code_that_parses_the_syntax_tree_reading_is_juice_s_token_rule",
        "tests/test_api_sequence.py::test_swapping_the_two_swaps_precision_and_recall",
        "tests/test_api_sequence.py::test_truncated_code_falls_back_to_juice_s_token_rule",
        "tests/test_build_parallel.py::test_a_killed_build_resumes_and_ends_the_same",
        "tests/test_build_parallel.py::test_two_workers_build_what_one_kernel_builds",
        "tests/test_disposable.py::test_every_recorded_target_passes_its_own_execution_score",
        "tests/test_env.py::test_a_dead_kernel_is_recovered_and_never_scored",
        "tests/test_env.py::test_execution_score_runs_the_prediction_and_rolls_back",
        "tests/test_env.py::test_vector_envs[async]",
        "tests/test_env_lifetime.py::test_close_leaves_nothing_under_load[forked kernels]",
        "tests/test_env_lifetime.py::test_close_leaves_nothing_under_load[started kernels]",
        "tests/test_env_lifetime.py::test_the_process_exits_cleanly[a step with the execution score, never closed]",
        "tests/test_full_disk.py::test_a_build_on_a_full_disk_ends_in_one_line_and_builds_again",
        "tests/test_inspect.py::test_a_spent_budget_takes_the_tools_away_and_the_execution_score_runs_the_answer",
        "tests/test_inspect.py::test_inspect_eval_scores_with_our_metrics_and_tools_reach_the_kernel",
        "tests/test_inspect.py::test_the_full_observation_puts_the_live_runtime_dump_in_the_prompt",
        "tests/test_inspect.py::test_the_sandbox_runs_python_in_a_copy_and_refuses_the_rest",
        "tests/test_kernel_environments.py::test_requirements_pip_cannot_meet_are_one_line_errors",
        "tests/test_lazy_state.py::test_a_tool_after_lazily_skipped_samples_sees_exactly_the_recorded_state",
        "tests/test_lazy_state.py::test_envs_of_one_kind_share_warm_kernels_and_the_last_close_ends_them",
        "tests/test_lazy_state.py::test_warm_kernels_are_handed_out_once_and_closed_with_the_env",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[crash-list_variables-execution]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[crash-no-tools-execution]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-list_variables+kill+memory_usage-execution]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-list_variables+kill+memory_usage-metrics]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-list_variables+kill-execution]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-list_variables+kill-metrics]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-list_variables-execution]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-list_variables-metrics]",
        "tests/test_one_score.py::test_every_path_gives_the_same_reward_and_flags[partial-no-tools-execution]",
        "tests/test_one_score.py::test_pass_at_k_draws_carry_the_same_rewards",
        "tests/test_openenv_server.py::test_an_idle_session_is_closed_with_its_kernel_and_a_stopped_server_closes_the_rest",
        "tests/test_openenv_server.py::test_rewards_over_the_network_equal_the_in_process_env[next-cell-full]",
        "tests/test_openenv_server.py::test_rewards_over_the_network_equal_the_in_process_env[next-cell-tools]",
        "tests/test_openenv_server.py::test_the_trl_example_rollout_earns_the_in_process_reward",
        "tests/test_pass_at_k.py::test_a_run_writes_one_row_per_sample_with_its_draws",
        "tests/test_pass_at_k.py::test_cli_run_with_samples_prints_pass_at_k",
        "tests/test_pass_at_k.py::test_different_draws_give_pass_at_k_above_pass_at_1",
        "tests/test_pass_at_k.py::test_resuming_the_run_adds_no_rows",
        "tests/test_pass_at_k.py::test_the_report_shows_pass_at_k",
        "tests/test_run_records.py::test_a_failing_slot_raises_its_error_once_every_env_is_closed_and_no_kernel_is_left",
        "tests/test_run_records.py::test_max_connections_holds_over_uneven_workers",
        "tests/test_run_records.py::test_max_connections_is_a_bound_over_the_whole_run_with_workers",
        "tests/test_run_records.py::test_the_readme_custom_agent_runs_from_the_cli_with_two_workers",
        "tests/test_state.py::test_a_kill_during_a_tool_call_flags_that_sample_only[local]",
        "tests/test_state.py::test_a_kill_during_an_advance_lands_on_the_next_sample[local]",
        "tests/test_state.py::test_a_prediction_that_kills_the_kernel_is_its_own_failure_and_touches_no_other_row",
        "tests/test_state.py::test_a_replayed_cell_that_times_out_flags_the_samples_it_cannot_serve",
        "tests/test_state.py::test_an_unrepairable_state_is_flagged_as_a_mismatch",
        "tests/test_state.py::test_damaged_snapshots_are_set_aside_and_the_state_rebuilt[local-flip]",
        "tests/test_state.py::test_damaged_snapshots_are_set_aside_and_the_state_rebuilt[local-garbage]",
        "tests/test_state.py::test_damaged_snapshots_are_set_aside_and_the_state_rebuilt[local-truncate]",
        "tests/test_state.py::test_every_bundled_sample_has_the_same_state_by_reset_as_by_stepping",
        "tests/test_state.py::test_full_mode_passes_the_checker_and_is_the_same_in_two_processes",
        "tests/test_state.py::test_reset_and_stepping_serve_the_same_state[local]",
        "tests/test_try_cell.py::test_hostile_candidates_are_answered_and_reach_nothing",
        "tests/test_try_cell.py::test_the_answer_shows_outputs_and_changed_variables_and_costs_a_call",
        "tests/test_try_cell.py::test_the_local_backend_warns_once_when_a_cell_is_first_tried",
        "tests/test_try_cell.py::test_the_output_task_refuses_in_one_line",
        "tests/test_try_cell.py::test_trying_the_target_reveals_only_the_candidates_own_run",
        "tests/test_workdir.py::test_june_log_files_survive_a_recorded_restart_in_pooled_kernels",
        "tests/test_workdir.py::test_served_states_have_the_files_of_their_step[local]",
        "tests/test_workdir.py::test_try_cell_runs_in_a_copy_with_the_files_of_the_state[local]",
    )
)


def needs(marker: str) -> Callable[[Fixture], Fixture]:
    """Mark every test that uses the decorated fixture (directly or through another fixture) ``marker``.

    Put it under ``@pytest.fixture``: ``@pytest.fixture`` / ``@needs("docker")`` / ``def engine(): ...``.
    """
    if marker not in NEEDS:
        raise ValueError(f"unknown need {marker!r}: one of {', '.join(NEEDS)}")

    def mark(fixture: Fixture) -> Fixture:
        fixture.themisto_needs = marker  # type: ignore[attr-defined]
        return fixture

    return mark


def _needs_of(item: pytest.Item) -> set[str]:
    """The needs of a test: from the fixtures in its closure and its backend parameters."""
    found: set[str] = set()
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for definition in info.name2fixturedefs.get(name, ()) if info is not None else ():
            if (marker := getattr(definition.func, "themisto_needs", None)) is not None:
                found.add(marker)
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for name in BACKEND_PARAMETERS:
            if callspec.params.get(name) in ("docker", "bwrap"):
                found.add(str(callspec.params[name]))
    return found


def _shares_module_work(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module or class (a kernel, a built dataset, a run)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "class", "package")
        for name in getattr(item, "fixturenames", ())
        for definition in info.name2fixturedefs.get(name, ())
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's loadgroup renames the node ids, and before -m selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by what it needs (see the module docstring); mark the rest ``fast``.

    Under pytest-xdist (``--dist loadgroup``), the tests of a module that share a module-scoped fixture (a
    kernel, a dataset, a run) go to one worker (``xdist_group`` named by the module), so that work is done
    once; the other tests spread over the workers one by one. (Session fixtures are made once per worker.)
    """
    named = {item.nodeid for item in items}
    files = {item.nodeid.split("::", 1)[0] for item in items}
    stale = sorted(i for i in MEASURED_SLOW if i not in named and i.split("::", 1)[0] in files)
    if stale and not any("::" in arg for arg in config.args):  # whole files were collected: a renamed test
        warnings.warn(pytest.PytestWarning(f"tests/conftest.py MEASURED_SLOW names no test: {stale}"), stacklevel=1)
    for item in items:
        for marker in sorted(_needs_of(item)):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        if item.nodeid in MEASURED_SLOW and item.get_closest_marker("slow") is None:
            item.add_marker("slow")
        if not any(item.get_closest_marker(m) for m in (*NEEDS, "slow")):
            item.add_marker("fast")
        if item.get_closest_marker("xdist_group") is None and _shares_module_work(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


_RUNNING: list[pytest.Item] = []
"""The test being set up or run (one at a time per process), for :func:`require_backend`'s check."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test marked with a backend that cannot run here, before any of its fixtures starts."""
    _RUNNING[:] = [item]
    for backend in ("docker", "bwrap"):
        if item.get_closest_marker(backend) is not None:
            require_backend(backend)


@functools.cache
def backend_unavailable(backend: str) -> str | None:
    """Why a backend cannot run here, or None. Probed once per test session by starting a kernel."""
    if backend == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    if backend == "bwrap" and os.geteuid() == 0:
        return (
            "bwrap refuses to run as root (the kernel would read root-only files; see test_bwrap_refuses_root); "
            "scripts/setup-bwrap-user.sh runs these tests as an unprivileged user"
        )
    if backend == "docker":
        try:
            Kernel("docker").start().close()
        except BackendUnavailableError as exc:
            return str(exc)
    return None


def require_backend(backend: str) -> None:
    """Skip (or, for a required backend, fail) when a backend cannot run on this machine; say why either way.

    A test that reaches docker or bwrap must carry that marker (from a fixture: see the module docstring),
    else the fast lane would run it: such a test fails here with the fix. CI runs as root, where bwrap
    refuses by design: its tests are skipped there with that reason."""
    running = _RUNNING[0] if _RUNNING else None
    if backend in ("docker", "bwrap") and running is not None and running.get_closest_marker(backend) is None:
        pytest.fail(
            f"{running.nodeid} uses the {backend} backend but is not marked {backend!r}: use the "
            f"{backend}_engine fixture, a `{backend}` value of a `backend` parameter, or a fixture under @needs"
        )
    reason = backend_unavailable(backend)
    if reason is None:
        return
    if backend in REQUIRED_BACKENDS:
        pytest.fail(f"the {backend} backend must run here (CI, THEMISTO_REQUIRE_BACKENDS), but: {reason}")
    pytest.skip(f"{backend} backend unavailable here: {reason}")


@pytest.fixture(scope="session")
@needs("docker")
def docker_engine() -> None:
    """The Docker engine and the kernel image (the test is marked ``docker``, skipped where none runs)."""
    require_backend("docker")


@pytest.fixture(scope="session")
@needs("environments")
def pinned_environments() -> None:
    """Pinned kernel environments may be made (venvs pip builds in the user cache: minutes when cold)."""


@pytest.fixture(scope="session")
@needs("bwrap")
def bwrap_backend() -> None:
    """The bwrap backend (the test is marked ``bwrap``, skipped as root or without bubblewrap)."""
    require_backend("bwrap")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each kernel backend in turn (skipped with the reason where it cannot run)."""
    require_backend(request.param)
    return str(request.param)


@pytest.fixture
def snapshot_dir(tmp_path: Path) -> Path:
    """A private snapshot store for one test."""
    return tmp_path / "snapshots"


@pytest.fixture
def local_kernel(snapshot_dir: Path) -> Iterator[Kernel]:
    """A started local kernel, closed after the test."""
    with Kernel("local", snapshot_dir=snapshot_dir) as kernel:
        yield kernel


@pytest.fixture(autouse=True, scope="session")
def nothing_left_running() -> Iterator[None]:
    """After the whole run: no kernel run directories and no labelled containers may remain.

    Kernels of this test session make their run directories in a temp root of its own (TMPDIR, which
    worker processes inherit), so kernels of other sessions on the machine do not count.
    """
    root = Path(tempfile.mkdtemp(prefix="themisto-tests-"))
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = str(root)
    yield
    close_shared_templates()  # the process's kernel templates (shared by its envs) live until exit otherwise
    tempfile.tempdir = saved
    if saved is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved
    left = sorted(p.name for p in root.glob("themisto-kernel-*"))
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"kernel run directories left behind: {left}"
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception:  # no engine here: no container can be left behind
        return
    mine = f"themisto-env.host-pid={os.getpid()}"  # other sessions on this machine have their own
    containers = client.containers.list(all=True, filters={"label": ["themisto-env.kernel", mine]})
    assert not containers, f"containers left behind: {[c.name for c in containers]}"


@pytest.fixture(scope="session")
def env_dataset(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A trajectory dataset built by the real builder from a small notebook, with its snapshot store."""
    from tests.env_fixtures import write_notebook
    from themisto_env.replay.build import build_dataset

    root = tmp_path_factory.mktemp("env-dataset")
    notebook = write_notebook(root / "sales.ipynb")
    report = build_dataset([notebook], root / "dataset", snapshot_dir=root / "snapshots", progress=False)
    assert report.built and not report.failed, report
    return {"dataset": str(root / "dataset"), "snapshot_dir": str(root / "snapshots")}


def wait_for(check: Callable[[], Any], seconds: float = 30.0, *, every: float = 0.1) -> bool:
    """Poll ``check`` until it holds or ``seconds`` pass; whether it held (then once more, at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return bool(check())
