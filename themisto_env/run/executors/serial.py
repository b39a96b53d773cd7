"""The ``serial`` executor: one env and agent in this process, one episode after another."""

from __future__ import annotations

from themisto_env.env.core import ThemistoEnv
from themisto_env.run.config import RunConfig
from themisto_env.run.executors import Rows
from themisto_env.run.plan import EpisodePlan
from themisto_env.run.rollout import env_options, episode_rows, make_run_agent


def serial_rows(config: RunConfig, plans: list[EpisodePlan]) -> Rows:
    """Run the episodes one after another with one env and agent in this process; yield their rows."""
    agent = make_run_agent(config)
    options = env_options(config, agent)
    env = ThemistoEnv(**options)
    try:
        for plan in plans:
            yield from episode_rows(config, env, agent, options, *plan)
    finally:
        env.close()


__all__ = ["serial_rows"]
