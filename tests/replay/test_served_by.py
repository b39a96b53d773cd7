"""A served state's report (`served_by`, which the env's ``info`` and the results rows show) and its trace
(``themisto.state.copied_by``, the serve's route) say the same of how the state was copied: forked from its
state's template (``local``), or restored into a kernel forked from the template (docker's and bwrap's copies
of model-written code, whose templates make no state templates)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require_backend
from themisto_env.bridges.openenv.server_metrics import route_of
from themisto_env.env.core import ThemistoEnv
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.state.kernel import TrajectoryKernel


@pytest.fixture(scope="module")
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = ThemistoEnv(task="next-cell", observation="static", backend="local", **env_dataset)
    yield made
    made.close()


@pytest.mark.parametrize(
    ("backend", "store_access", "copied_by"),
    [("local", "read", "fork"), ("docker", "copy", "restore"), ("bwrap", "copy", "restore")],
    ids=["local", "docker", "bwrap"],
)
def test_served_by_says_what_the_trace_says(
    env: ThemistoEnv, env_dataset: dict[str, str], spans: Any, backend: str, store_access: str, copied_by: str
) -> None:
    require_backend(backend)
    sample = next(s for s in reversed(env.episode.samples) if s.step > 3)  # served from a snapshot
    trajectory = env.episode.trajectories[sample.trajectory_id]
    snapshots = env_dataset["snapshot_dir"]
    with KernelTemplate(backend, store_access=store_access, snapshot_dir=snapshots, spares=0) as template:
        owner = TrajectoryKernel(template.kernel, template=lambda: template)
        try:
            report = owner.serve(trajectory, sample.step)
        finally:
            owner.close()
    assert report.check == "verified", report
    finished = spans.get_finished_spans()
    [restore] = [s for s in finished if s.name == "themisto.state.restore"]
    [serve] = [s for s in finished if s.name == "themisto.state.serve"]
    assert restore.attributes["themisto.state.copied_by"] == serve.attributes["themisto.state.route"] == copied_by
    assert route_of(report) == copied_by, report.served_by
    if copied_by == "restore":
        assert report.served_by.startswith("restore (into a forked copy: "), report.served_by
    else:
        assert report.served_by == "fork"
