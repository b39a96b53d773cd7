"""A group of completions of one sample run together (`DisposableKernels.run_many`): each scores as it
would alone, whatever another completion of the group does.

Local backend: its copies can signal their template, so a hostile completion can kill the state template
its siblings were forked from; the group must not charge the siblings for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import InfrastructureError
from themisto_env.scoring.execution import execution_scores, score_run
from themisto_env.state.copies import CodeRun, DisposableKernels
from themisto_env.state.kernel import TrajectoryKernel

KILL_TEMPLATE = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(5)\n"


@pytest.fixture(scope="module")
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = ThemistoEnv(task="next-cell", observation="static", backend="local", execution_score=True, **env_dataset)
    yield made
    made.close()


@pytest.fixture(scope="module")
def kernels(env: ThemistoEnv) -> DisposableKernels:
    return env.episode.scorer.disposable_kernels()


@pytest.fixture(scope="module")
def forked_sample(env: ThemistoEnv, kernels: DisposableKernels) -> tuple[object, int]:
    """A sample whose state is served as a copy of a state template (the group's copies are forked)."""
    owner = TrajectoryKernel(kernels.pool.take, template=kernels.template)
    for sample in env.episode.samples:
        trajectory = env.episode.trajectories[sample.trajectory_id]
        if sample.step > 3 and owner.copy_source(trajectory, sample.step) is not None:
            return trajectory, sample.step
    pytest.fail("no sample of the test dataset is served by a fork")


def _same(group: CodeRun | InfrastructureError, alone: CodeRun) -> bool:
    assert isinstance(group, CodeRun), group
    return (group.status, group.changed, group.outputs, group.failure) == (
        alone.status,
        alone.changed,
        alone.outputs,
        alone.failure,
    )


@pytest.mark.slow
def test_a_group_runs_each_completion_as_it_would_run_alone(
    kernels: DisposableKernels, forked_sample: tuple[object, int]
) -> None:
    trajectory, step = forked_sample
    target = trajectory.steps[step].source  # type: ignore[attr-defined]
    codes = [target, "made = 41 + 1\nprint(made)", "1 / 0", target, "", "del made_nothing"]
    group = kernels.run_many(trajectory, step, codes, timeout_s=30)  # type: ignore[arg-type]
    assert len(group) == len(codes)
    for code, result in zip(codes, group, strict=True):
        assert _same(result, kernels.run(trajectory, step, code, timeout_s=30)), code  # type: ignore[arg-type]
    scores = execution_scores(kernels, trajectory, step, [target] * 3, timeout_s=30)  # type: ignore[arg-type]
    assert all(getattr(scored, "passed", False) for scored in scores), scores


@pytest.mark.slow
def test_a_completion_that_kills_the_state_template_costs_its_siblings_nothing(
    kernels: DisposableKernels, forked_sample: tuple[object, int]
) -> None:
    """The siblings are still running (a slow start) when the hostile one kills the template they were forked
    from, which takes their kernels along (each watches its parent): they are run again alone, not failed."""
    trajectory, step = forked_sample
    sibling = "__import__('time').sleep(2.5)\n" + trajectory.steps[step].source  # type: ignore[attr-defined]
    codes = [sibling, KILL_TEMPLATE, sibling, sibling]
    source = TrajectoryKernel(kernels.pool.take, template=kernels.template).copy_source(trajectory, step)  # type: ignore[arg-type]
    assert source is not None
    killed = source[0].state(source[1])
    group = kernels.run_many(trajectory, step, codes, timeout_s=30)  # type: ignore[arg-type]
    assert not killed.is_alive(), "the hostile completion did not reach the state template"
    alone = kernels.run(trajectory, step, sibling, timeout_s=30)  # type: ignore[arg-type]
    assert alone.status == "ok"
    for index in (0, 2, 3):
        assert _same(group[index], alone), group[index]
        scored = score_run(group[index], trajectory, step)  # type: ignore[arg-type]
        assert scored is not None and scored.passed
    hostile = group[1]
    assert isinstance(hostile, CodeRun) and hostile.failure == "exit", hostile  # its own doing, judged alone
