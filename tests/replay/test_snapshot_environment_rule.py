"""A snapshot written in another kernel environment is refused by the store, with one one-line reason, at all
three callers: a kernel's restore, a template's state, and the state server's choice of a route (which
replays instead)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import SnapshotEnvironmentError
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.sandbox.store.snapshot_store import SnapshotStore
from themisto_env.sandbox.template.core import KernelTemplate

OTHER = "0123456789ab"  # a kernel environment id of none of these kernels


@pytest.fixture
def foreign_store(env_dataset: dict[str, str], tmp_path: Path) -> SnapshotStore:
    """A copy of the dataset's snapshot store whose every snapshot is recorded as written in ``OTHER`` only
    (the record the rule reads: ``<digest>.env``)."""
    root = tmp_path / "snapshots"
    shutil.copytree(env_dataset["snapshot_dir"], root)
    store = SnapshotStore(root)
    for digest in store:
        store.path(digest).with_suffix(".env").write_text(f"{OTHER}\n")
    return store


@pytest.mark.slow
def test_a_snapshot_of_another_environment_is_refused_with_one_reason_everywhere(
    env_dataset: dict[str, str], foreign_store: SnapshotStore
) -> None:
    env = ThemistoEnv(
        task="next-cell", dataset=env_dataset["dataset"], snapshot_dir=str(foreign_store.root), warm_kernels=0
    )
    try:
        trajectory_id = env.episode.episode_ids[0]
        last = len(env.episode.episode_samples[trajectory_id]) - 1
        env.reset(options={"trajectory": trajectory_id, "sample": last})
        report = env.episode.serve_state()
        # the state server asked the store, refused the snapshot and replayed (still the recorded state)
        assert report.refused_snapshots and not report.route.startswith("snapshot"), report
        assert report.check == "verified", report
        digest = report.refused_snapshots[0]
        reason = foreign_store.refusal(digest, None)
        assert reason is not None and "\n" not in reason
        assert f"written in kernel environment {OTHER}, not in this kernel's (default)" in reason
        kernel = env.episode.tool_context().kernel
        with pytest.raises(SnapshotEnvironmentError) as restored:
            kernel.snapshots.restore(digest)
        assert str(restored.value) == reason
    finally:
        env.close()
    with KernelTemplate(KernelSpec("local", snapshot_dir=foreign_store.root), spares=0) as template:
        with pytest.raises(SnapshotEnvironmentError) as forked:
            template.state(digest)
        assert str(forked.value) == reason
    foreign_store.note_environment(digest, None)  # a kernel of this environment wrote the same bytes too
    assert foreign_store.refusal(digest, None) is None and foreign_store.refusal(digest, OTHER) is None
