"""Running an agent over every episode of an env, as a runner would, and keeping per-sample results."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from themisto_env.agents import Agent, AgentUsage
from themisto_env.env.actions import Prediction


@dataclass(frozen=True)
class SampleResult:
    """What happened on one sample."""

    sample_id: str
    scores: dict[str, float]
    reward: float
    prediction: str
    tool_calls: list[dict[str, Any]]
    usage: AgentUsage


def run_agent(
    env: gym.Env[dict[str, Any], dict[str, Any]], agent: Agent, *, use_async: bool = False
) -> list[SampleResult]:
    """Play every episode (trajectory) of ``env`` with ``agent``; one result per scored sample."""
    results: list[SampleResult] = []
    episodes = len(env.unwrapped.episode.episode_ids)  # type: ignore[attr-defined]
    for episode in range(episodes):
        obs, info = env.reset(options={"trajectory": episode})
        agent.reset(info)
        reward_sum = 0.0
        while True:
            action = asyncio.run(agent.aact(obs, info)) if use_async else agent.act(obs, info)  # type: ignore[attr-defined]
            obs, reward, terminated, truncated, info = env.step(action)
            reward_sum += float(reward)
            if "scores" in info:
                text = action.text if isinstance(action, Prediction) else ""
                results.append(
                    SampleResult(
                        info["scored_sample_id"], info["scores"], reward_sum, text, info["tool_calls"], agent.usage
                    )
                )
                reward_sum = 0.0
            if terminated or truncated:
                break
    return results


def mean(results: list[SampleResult], metric: str) -> float:
    """The mean of one score over results."""
    return sum(r.scores[metric] for r in results) / len(results)
