"""One OpenEnv session's environment: the env's [`Episode`][themisto_env.env.Episode] (its turns, over a
state server, a scorer and the episode's record) behind OpenEnv's ``Environment`` contract (``reset`` /
``step`` / ``state`` / ``close``).

The server makes one per WebSocket session (`themisto_env.bridges.openenv.server`), so each session
has its own episode and kernel; a step's observation, reward and info are the episode's, the ones the gym
env gives for the same action (its reward computed by the one
[`score_sample`][themisto_env.scoring.score_sample]), so a trainer over the network is paid what an in-process
trainer is paid for the same actions.

Making one is cheap: the episode is made at the first ``reset`` (and its kernel when a state is needed), so
OpenEnv's stateless ``GET /state`` and ``/metadata`` (which make and close an environment per request) cost
no kernel. A ``reset`` may ask for the other task or observation mode than the server's default; the
session's episode is then replaced by one with those options. A ``seed`` draws the trajectory as the gym
env's ``reset(seed=...)`` does. Once closed (the client left, or the session sat idle past the server's
timeout), every call raises one line saying so.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from themisto_env.bridges.openenv.metered import close_metered_episode, open_metered_episode
from themisto_env.bridges.openenv.models import ThemistoAction, ThemistoObservation, ThemistoState
from themisto_env.bridges.openenv.server_metrics import ServerMetrics
from themisto_env.data.limits import echo
from themisto_env.env.episode import Episode
from themisto_env.errors import ConfigError

__all__ = ["RESET_KEYS", "ThemistoServedEnv"]

RESET_KEYS = ("seed", "episode_id", "task", "observation", "trajectory", "sample", "sample_id")
"""What a session's ``reset`` reads: OpenEnv's ``seed`` and ``episode_id``, the env's ``trajectory`` and
``sample`` options (or ``sample_id``: start at that sample, of the task it names), and ``task`` /
``observation`` to change the session's episode."""

_SWITCHABLE = {"task": ("next-cell", "output"), "observation": ("static", "full", "tools")}


class ThemistoServedEnv(Environment[ThemistoAction, ThemistoObservation, ThemistoState]):
    """A session's episode, spoken to through OpenEnv (see the module docstring).

    Args:
        options: The env's options ([`EnvConfig`][themisto_env.env.EnvConfig]; ``dataset`` may be an open
            [`Dataset`][themisto_env.replay.Dataset]), the server's defaults for every session.
        metrics: The server's metrics: the session's episode then runs on metered parts
            (`themisto_env.bridges.openenv.metered`).
    """

    #: Each session has its own episode and kernel: OpenEnv may run many at once.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, options: Mapping[str, Any] | None = None, *, metrics: ServerMetrics | None = None) -> None:
        super().__init__()
        self._options: dict[str, Any] = dict(options or {})
        self._metrics = metrics
        self._episode: Episode | None = None
        self._rng: np.random.Generator | None = None  # draws trajectories (seeded by a reset's seed)
        self._closed: str | None = None  # why, once closed
        self._closing = threading.Lock()
        self._state = ThemistoState(
            task=str(self._options.get("task", "next-cell")),
            observation_mode=str(self._options.get("observation", "tools")),
        )

    # -- OpenEnv's Environment -----------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ThemistoObservation:
        """Start an episode (see `RESET_KEYS`); an unknown key is refused, never ignored.

        Raises:
            ConfigError: An unknown key or value, or the session is closed.
        """
        self._check_open()
        unknown = [str(key) for key in kwargs if key not in RESET_KEYS]
        if unknown:
            raise ConfigError(f"unknown reset key {echo(unknown[0])}; reset takes {', '.join(RESET_KEYS)}")
        for key, allowed in _SWITCHABLE.items():
            if key in kwargs and kwargs[key] not in allowed:
                raise ConfigError(f"reset: {key} is one of {', '.join(allowed)}, got {echo(kwargs[key])}")
        options = {key: kwargs[key] for key in ("trajectory", "sample") if kwargs.get(key) is not None}
        task = str(kwargs.get("task", self._state.task))
        sample_id = kwargs.get("sample_id")
        if sample_id is not None:
            if options:
                raise ConfigError("reset: give sample_id, or trajectory and sample, not both")
            task = _task_of(sample_id)
        episode = self._episode_for(task, str(kwargs.get("observation", self._state.observation_mode)))
        if sample_id is not None:
            options = _position_of(episode, sample_id)
        if seed is not None:  # as gymnasium seeds an env's generator
            self._rng = np.random.default_rng(seed)
        obs, info = episode.reset(options or None, rng=self._rng)
        self._state = ThemistoState(
            episode_id=episode_id or uuid.uuid4().hex,
            step_count=0,
            task=episode.config.task,
            observation_mode=episode.config.observation,
            trajectory_id=info["trajectory_id"],
            sample_id=info["sample_id"],
            samples_left=info["samples_left"],
        )
        return ThemistoObservation(**obs, info=info, reward=None, done=False)

    def step(self, action: ThemistoAction, timeout_s: float | None = None, **kwargs: Any) -> ThemistoObservation:
        """Take one action in the session's episode (``timeout_s`` is OpenEnv's; the sandbox's own limits
        apply instead).

        Raises:
            ConfigError: No episode (``reset`` first), the episode is over, or the session is closed.
        """
        self._check_open()
        episode = self._episode
        if episode is None or self._state.trajectory_id is None:
            raise ConfigError(
                "no episode: reset first (over HTTP, /reset and /step each get a fresh env that is closed after "
                "the request; an episode lives in a WebSocket session: /ws, ThemistoEnvClient)"
            )
        if self._state.done:
            raise ConfigError("the episode is over: reset to start another")
        obs, reward, terminated, truncated, info = episode.step(action.env_action())
        done = bool(terminated or truncated)
        state = self._state
        state.step_count += 1
        state.total_reward += float(reward)
        state.scored += 1 if "scored_sample_id" in info else 0
        state.sample_id, state.samples_left, state.done = info["sample_id"], info["samples_left"], done
        return ThemistoObservation(**obs, info=info, reward=float(reward), done=done)

    @property
    def state(self) -> ThemistoState:
        """Where the session's episode is (a copy: read from the server's event loop)."""
        return self._state.model_copy()

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="themisto",
            description=(
                "Predict the next cell (or a cell's output) of a real Jupyter development trajectory, "
                "querying the live kernel state with read-only tools; rewarded by exact match, ROUGE-L and chrF."
            ),
            version="0.1.0",
            documentation_url="https://github.com/JetBrains-Research/themisto",
        )

    def close(self) -> None:
        """Close the episode and its kernels; idempotent, and a second caller (OpenEnv's session end and the
        server's shutdown may both close) returns only once the first has finished. Later calls raise."""
        with self._closing:
            self._closed = self._closed or (
                "the session is closed (the client left, or it sat idle past the server's timeout): reconnect"
            )
            episode, self._episode = self._episode, None
            if episode is not None:
                self._close_episode(episode)

    # -- inside --------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed is not None:
            raise ConfigError(self._closed)

    def _episode_for(self, task: str, observation: str) -> Episode:
        """The session's episode for ``task`` and ``observation`` (made, or replaced, as needed)."""
        episode = self._episode
        if episode is not None and (episode.config.task, episode.config.observation) == (task, observation):
            return episode
        if episode is not None:
            self._episode, self._rng = None, None
            self._close_episode(episode)
        options = {**self._options, "task": task, "observation": observation}
        if self._metrics is not None:
            self._episode = open_metered_episode(options, self._metrics)
        else:
            self._episode = Episode.open(**options)
        return self._episode

    def _close_episode(self, episode: Episode) -> None:
        if self._metrics is not None:
            close_metered_episode(episode)
        else:
            episode.close()


def _task_of(sample_id: object) -> str:
    """The task a sample id names (``TRAJECTORY/TASK/STEP``)."""
    parts = sample_id.split("/") if isinstance(sample_id, str) else []
    if len(parts) < 3 or parts[-2] not in _SWITCHABLE["task"]:
        raise ConfigError(f"reset: sample_id is TRAJECTORY/TASK/STEP, got {echo(sample_id)}")
    return parts[-2]


def _position_of(episode: Episode, sample_id: str) -> dict[str, Any]:
    """The episode's reset options (trajectory, sample index) that start at ``sample_id``."""
    trajectory = sample_id.rsplit("/", 2)[0]
    episode.dataset.check_served(sample_id=sample_id)  # a split's side refuses the other side's (SplitError)
    for index, sample in enumerate(episode.episode_samples.get(trajectory, ())):
        if sample.id == sample_id:
            return {"trajectory": trajectory, "sample": index}
    raise ConfigError(f"reset: no sample {echo(sample_id)} in the served dataset under its sample rule")
