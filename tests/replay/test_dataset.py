"""The Dataset object: opened by default, name or path, checked with one clear error, cached, and listing
the samples the env serves."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from themisto_env.data.samples import TASKS, SampleRule, make_samples, samples_by_trajectory
from themisto_env.data.trajectory import MANIFEST, TRAJECTORIES, read_trajectories
from themisto_env.env.core import ThemistoEnv
from themisto_env.errors import ConfigError, DataError
from themisto_env.replay.dataset import BUNDLED, Dataset
from themisto_env.replay.resolve import bundled_dataset_dir


@pytest.fixture
def copied(env_dataset: dict[str, str], tmp_path: Path) -> Path:
    """A copy of the small built dataset that a test may change."""
    return Path(shutil.copytree(env_dataset["dataset"], tmp_path / "dataset"))


def test_the_default_and_the_bundled_name_open_the_bundled_data() -> None:
    dataset = Dataset.open()
    assert dataset.path == bundled_dataset_dir("local").resolve()
    assert Dataset.open(BUNDLED) is dataset
    assert dataset.manifest.backend == "local" and dataset.samples("next-cell")


def test_a_folder_opens_once_per_process_until_its_files_change(copied: Path) -> None:
    dataset = Dataset.open(copied)
    assert dataset.path == copied.resolve() and dataset.manifest.format == "themisto-trajectories"
    assert Dataset.open(str(copied)) is dataset
    assert dataset.samples("output") is not dataset.samples("output"), "callers get their own list"
    assert dataset.samples("output") == dataset.samples("output")
    with open(copied / TRAJECTORIES, "a", encoding="utf-8") as f:  # a rebuilt session appended
        f.write((copied / TRAJECTORIES).read_text().splitlines()[0] + "\n")
    reopened = Dataset.open(copied)
    assert reopened is not dataset
    assert reopened.samples("next-cell") == dataset.samples("next-cell"), "the last line of an id wins"


def test_samples_are_what_make_samples_gives_and_what_the_env_serves(env_dataset: dict[str, str]) -> None:
    dataset = Dataset.open(env_dataset["dataset"])
    trajectories = read_trajectories(env_dataset["dataset"])
    loose = SampleRule(min_executions=2, max_length_quantile=None)
    for task in TASKS:
        for rule in (None, loose):
            assert dataset.samples(task, rule) == make_samples(trajectories, task, rule)
    assert len(dataset.samples("next-cell", loose)) > len(dataset.samples("next-cell"))
    env = ThemistoEnv(dataset=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"])
    try:
        assert env.episode.dataset is dataset, "the env opens the same dataset object"
        assert env.episode.samples == dataset.samples("next-cell")
    finally:
        env.close()
    shared = ThemistoEnv(task="output", dataset=dataset, snapshot_dir=env_dataset["snapshot_dir"])
    try:
        assert shared.episode.dataset is dataset and shared.episode.config.dataset == str(dataset.path)
        assert shared.episode.samples == dataset.samples("output")
    finally:
        shared.close()


def test_episodes_are_in_trajectory_and_step_order(env_dataset: dict[str, str]) -> None:
    dataset = Dataset.open(env_dataset["dataset"])
    for task in TASKS:
        episodes = dataset.episodes(task)
        assert list(episodes) == sorted(episodes)
        assert episodes == samples_by_trajectory(dataset.samples(task))
        for trajectory_id, samples in episodes.items():
            steps = [s.step for s in samples]
            assert steps == sorted(steps) and len(set(steps)) == len(steps)
            assert {s.trajectory_id for s in samples} == {trajectory_id}


def test_a_sample_id_finds_its_sample_and_its_place_in_the_episode(env_dataset: dict[str, str]) -> None:
    dataset = Dataset.open(env_dataset["dataset"])
    for task in TASKS:
        for trajectory_id, samples in dataset.episodes(task).items():
            for index, sample in enumerate(samples):
                assert dataset.sample(sample.id) == sample
                assert dataset.episode_position(sample.id) == (trajectory_id, index)
    last = dataset.samples("next-cell")[-1]
    with pytest.raises(ConfigError, match="did you mean") as unknown:
        dataset.sample(last.id.replace(f"/{last.step}", "/99"))
    assert str(last.id) in str(unknown.value)
    with pytest.raises(ConfigError, match="not a sample id"):
        dataset.sample("no-task-here")


def test_a_missing_or_corrupt_folder_is_one_line_naming_the_file(copied: Path, tmp_path: Path) -> None:
    def error(folder: Path) -> str:
        with pytest.raises(DataError) as raised:
            Dataset.open(folder).trajectories  # noqa: B018 (reading them is the point)
        message = str(raised.value)
        assert "\n" not in message
        return message

    assert str(tmp_path / "nowhere") in error(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert MANIFEST in error(empty) and "themisto data build" in error(empty)
    manifest = (copied / MANIFEST).read_text()
    newer = re.sub(r'"version": \d+', '"version": 99', manifest)
    assert newer != manifest
    (copied / MANIFEST).write_text(newer)
    assert str(copied / MANIFEST) in error(copied) and "newer" in error(copied)
    (copied / MANIFEST).write_text(manifest[: len(manifest) // 2])
    assert str(copied / MANIFEST) in error(copied)
    (copied / MANIFEST).write_text(manifest)
    (copied / TRAJECTORIES).write_text('{"id": "torn"\n')
    message = error(copied)
    assert str(copied / TRAJECTORIES) in message and "row 1" in message
