"""The fork route's spares of the state an owner serves next (`TrajectoryKernel.prepare`): forked ahead where
that state's template runs, handed out by the serve, in the state the recording checks; nothing forked for a
state nobody made a template of."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import wait_for
from themisto_env.env.core import ThemistoEnv
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.state.kernel import TrajectoryKernel


@pytest.fixture(scope="module")
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = ThemistoEnv(task="next-cell", observation="static", backend="local", **env_dataset)
    yield made
    made.close()


@pytest.fixture
def template(env_dataset: dict[str, str]) -> Iterator[KernelTemplate]:
    with KernelTemplate("local", preload=("numpy", "pandas"), snapshot_dir=env_dataset["snapshot_dir"]) as made:
        yield made


def _owner(template: KernelTemplate, snapshot_dir: str) -> TrajectoryKernel:
    return TrajectoryKernel(lambda: Kernel("local", snapshot_dir=snapshot_dir), template=lambda: template)


@pytest.mark.slow
def test_the_next_state_is_served_by_the_spare_prepared_for_it(
    env: ThemistoEnv, template: KernelTemplate, env_dataset: dict[str, str]
) -> None:
    sample = next(s for s in reversed(env.episode.samples) if s.step > 3)
    trajectory = env.episode.trajectories[sample.trajectory_id]
    first, second = _owner(template, env_dataset["snapshot_dir"]), _owner(template, env_dataset["snapshot_dir"])
    try:
        source = second.copy_source(trajectory, sample.step)
        assert source is not None
        assert not second.prepare(trajectory, sample.step), "a spare forked for a state with no template yet"
        assert template.live_states() == 0
        assert first.serve(trajectory, sample.step).check == "verified"  # makes the state's template
        state = template.state(source[1])
        state.trim()  # nothing kept from that serve: only what prepare forks
        assert second.prepare(trajectory, sample.step)
        assert wait_for(lambda: len(state._spares) == 1, seconds=60), "no spare forked for the next state"
        spare = state._spares[0]
        report = second.serve(trajectory, sample.step)
        assert second.kernel is spare, "the serve forked its own copy beside the prepared spare"
        assert report.check == "verified" and report.served_by == "fork", report
    finally:
        first.close()
        second.close()


def test_nothing_is_prepared_where_the_kernel_replays_forward(
    env: ThemistoEnv, template: KernelTemplate, env_dataset: dict[str, str]
) -> None:
    sample = next(s for s in env.episode.samples if s.step > 3)
    trajectory = env.episode.trajectories[sample.trajectory_id]
    owner = _owner(template, env_dataset["snapshot_dir"])
    try:
        assert owner.serve(trajectory, sample.step).check == "verified"
        states = template.live_states()
        assert not owner.prepare(trajectory, sample.step)  # in place: nothing to copy
        assert template.live_states() == states
    finally:
        owner.close()
