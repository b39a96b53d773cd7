"""The env builds its kernel spec once: one environment resolution per env, one spec handed to its parts."""

from __future__ import annotations

from typing import Any

import pytest

from themisto_env.env.core import ThemistoEnv
from themisto_env.env.episode import Episode
from themisto_env.replay.resolve import dataset_kernel_environment


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The calls of the one lookup of a dataset's kernel environment the env's parts make (the env's
    `kernel_spec.kernel_environment`; before the spec, the state server, the scorer and the episode each
    made their own)."""
    calls: list[tuple[Any, ...]] = []

    def counted(*args: Any, **kwargs: Any) -> str | None:
        calls.append(args)
        return dataset_kernel_environment(*args, **kwargs)

    monkeypatch.setattr("themisto_env.env.kernel_spec.dataset_kernel_environment", counted)
    return calls


def test_an_env_resolves_its_kernel_environment_once_and_hands_one_spec_down(
    env_dataset: dict[str, str], resolutions: list[tuple[Any, ...]]
) -> None:
    env = ThemistoEnv(task="next-cell", **env_dataset)
    try:
        assert len(resolutions) == 1
        episode = env.episode
        server, scorer = episode.server, episode.scorer
        assert server.spec == episode.spec  # the env's own kernels read the store
        assert scorer.spec == episode.spec.with_access("copy") != server.spec  # model-written code gets copies
        assert server.spec.preload and scorer.disposable_kernels().spec == scorer.spec
        assert scorer.disposable_kernels().pool.preload == server.spec.preload  # one preload rule
    finally:
        env.close()
    assert len(resolutions) == 1


def test_an_episode_given_its_parts_takes_their_spec(
    env_dataset: dict[str, str], resolutions: list[tuple[Any, ...]]
) -> None:
    with Episode.open(task="next-cell", **env_dataset) as first:
        assert len(resolutions) == 1
        with Episode(first.config, first.dataset, server=first.server, scorer=first.scorer) as second:
            assert second.spec is first.spec
    assert len(resolutions) == 1
