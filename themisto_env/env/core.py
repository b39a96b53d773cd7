"""The gymnasium environment: one trajectory per episode, a live kernel, tools, predictions, rewards.

[`ThemistoEnv`][themisto_env.env.ThemistoEnv] adds gymnasium's spaces, seeding and rendering to its
[`Episode`][themisto_env.env.Episode] (``env.unwrapped.episode``), which takes the turns:

1. ``reset`` picks a trajectory (by ``seed``, or ``options={"trajectory": id, "sample": n}``).
2. For each sample, the agent takes tool calls (``kind=0``; ``tools`` mode; each costs ``tool_cost``, at most
   ``tool_budget`` per sample: past it a call is refused, runs nothing and costs nothing), then one prediction
   (``kind=1``), scored by [`score_sample`][themisto_env.scoring.score_sample] (docs/reward.md): the prediction
   step pays the sample's reward less what its tool steps paid. With ``attempts=K`` each sample takes K
   predictions (pass@k).
3. The next observation is the next sample's; ``terminated`` is True after the trajectory's last sample.

A sample's state is served only when something needs the live kernel (a tool call, the ``full`` mode), and
checked against the recording (``info["state"]``); model-written code runs only in disposable kernels. What
happened to a sample is reported with that sample (``info`` is a `StepInfo`); nothing the agent reaches
reveals the target. docs/environment.md says the rest.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym

from themisto_env.env.config import env_config_and_dataset
from themisto_env.env.episode import Episode, StepResult
from themisto_env.env.spaces import action_space, observation_space

__all__ = ["ThemistoEnv"]


class ThemistoEnv(gym.Env[dict[str, Any], dict[str, Any]]):
    """Predict the next cell (or a cell's output) of a Jupyter development trajectory.

    See the module docstring for the turn structure; [`EnvConfig`][themisto_env.env.EnvConfig] for the options. A
    gymnasium adapter (spaces, seeding, the gym signatures, rendering) over its
    ``episode`` ([`Episode`][themisto_env.env.Episode]: the turns, the
    live state, the scorer and the record; ``env.unwrapped.episode`` under ``gym.make``).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, **options: Any) -> None:
        """Make an env over ``options`` ([`EnvConfig`][themisto_env.env.EnvConfig]; ``dataset`` may be an open
        [`Dataset`][themisto_env.replay.Dataset], shared with its other users)."""
        config, dataset = env_config_and_dataset(options)
        self.render_mode = render_mode
        #: The episode's turns over the env's parts (nothing started yet).
        self.episode = Episode(config, dataset)
        self.observation_space = observation_space(config.max_text_chars, config.tool_budget)
        self.action_space = action_space(config.max_text_chars)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``options`` may name ``trajectory`` (id or index) and ``sample`` (an index
        into that trajectory's samples, or a sample id such as ``results.jsonl``'s ``sample_id``, whose
        trajectory is then found); otherwise the trajectory is drawn with the seeded RNG."""
        super().reset(seed=seed)
        return self.episode.reset(options, rng=self.np_random)

    def step(self, action: Any) -> StepResult:
        return self.episode.step(action)

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.episode.current_sample is None:
            return None
        obs = self.episode.observation()
        return f"{obs['history']}\n# Next cell:\n{obs['cell']}\n{obs['tool_result']}"

    def close(self) -> None:
        self.episode.close()
