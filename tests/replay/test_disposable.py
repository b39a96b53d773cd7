"""Disposable kernels on the local backend: the measurement is checked, the reference is honest.

The hostile suite (``tests/scoring/test_hostile_predictions.py``) runs every attack on docker; these are the
checks that need no container: every recorded target passes its own execution score (so pass@k is not
capped below 1 by the machinery), a forged measurement is refused rather than believed or crashed on,
and empty code needs no kernel.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import InfrastructureError
from themisto_env.scoring.execution import execution_score, score_run
from themisto_env.state.copies import DisposableKernels

SEALED = "import sys as _s\n_h = _s.modules['_themisto_helper']\n"


@pytest.fixture(scope="module")
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = ThemistoEnv(task="next-cell", observation="static", backend="local", execution_score=True, **env_dataset)
    yield made
    made.close()


@pytest.mark.slow
def test_every_recorded_target_passes_its_own_execution_score(env: ThemistoEnv) -> None:
    kernels = env.episode.scorer.disposable_kernels()
    failing = {}
    for sample in env.episode.samples:
        trajectory = env.episode.trajectories[sample.trajectory_id]
        scored = execution_score(kernels, trajectory, sample.step, trajectory.steps[sample.step].source, timeout_s=30)
        assert scored is not None
        if not scored.passed:
            failing[sample.id] = scored
    assert not failing, failing


@pytest.mark.parametrize(
    "lie",
    [
        'lambda *a: \'{"ok": {"sales": 5}}\'',  # not a fingerprint string
        "lambda *a: '{\"ok\": [1, 2]}'",  # not a mapping
        "lambda *a: '{\"ok\": ' + '[' * 100000 + ']' * 100000 + '}'",  # nested past the recursion limit
        "lambda *a: 'not json at all'",
    ],
)
def test_a_forged_measurement_is_unreadable_not_a_crash(env: ThemistoEnv, lie: str) -> None:
    sample = env.episode.samples[1]
    trajectory = env.episode.trajectories[sample.trajectory_id]
    code = f"{SEALED}for _c in _h.SEALED.values():\n    _c['call'] = {lie}\n"
    run = env.episode.scorer.disposable_kernels().run(trajectory, sample.step, code, timeout_s=30)
    assert run.failure == "unreadable", run
    scored = score_run(run, trajectory, sample.step)
    assert scored is not None and scored.value == 0.0 and scored.failure == "unreadable"


def test_empty_code_needs_no_kernel(env: ThemistoEnv) -> None:
    kernels = DisposableKernels("local")
    sample = env.episode.samples[0]
    try:
        run = kernels.run(env.episode.trajectories[sample.trajectory_id], sample.step, "  \n", timeout_s=5)
        assert run.status == "ok" and run.changed == {} and run.outputs == []
        assert not kernels.pool._threads, "a kernel was started for nothing"
    finally:
        kernels.close()


def test_no_disposable_kernels_are_made_for_a_closed_provider(env_dataset: dict[str, str]) -> None:
    """A rollout's thread asking for copies while its owner closes gets an infrastructure fault, not a set of
    copies that nobody would close (they would hold the shared templates for the life of the process)."""
    made = ThemistoEnv(task="next-cell", observation="static", backend="local", **env_dataset)
    provider = made.episode.server
    made.close()
    with pytest.raises(InfrastructureError, match="closed"):
        provider.copies()
    assert provider.disposable is None
