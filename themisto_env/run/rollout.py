"""A rollout: one agent and one env score the wanted samples of one trajectory.

The rollout is `aepisode_rows`, an async generator of
[`ResultRow`][themisto_env.run.ResultRow] s. How it asks the agent (``act``) and calls the env
(``call``) is the caller's:

- the concurrent executor awaits the agent's ``aact`` and runs each env call in the episode's own thread,
  so that many episodes share one event loop;
- `episode_rows` (the serial executor, worker processes, Ray actors) calls the agent's ``act`` and
  the env in place, in the caller's thread, and runs the loop with `run_in_place`: a runner for a
  coroutine that never suspends, so no event loop exists while the agent and the kernel work (as in a
  plain loop).

A sample's bookkeeping (which samples are left, each sample's predictions, when its row is complete)
is `Episode`'s; the row itself is built by `themisto_env.run.rows.make_row`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from themisto_env import tracing
from themisto_env.agents.base import checked_action
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.info import StepInfo
from themisto_env.errors import ConfigError, ModelError
from themisto_env.run.config import RunConfig
from themisto_env.run.results import ResultRow
from themisto_env.run.rows import Drawn, agent_record, make_row, now

Act = Callable[[Any, dict[str, Any]], Awaitable[Any]]
"""How the loop asks the agent for the next action, given the observation and info."""
Call = Callable[..., Awaitable[Any]]
"""How the loop calls the env: ``await call(function, *args)`` runs the blocking ``function(*args)``."""
T = TypeVar("T")


def make_run_agent(config: RunConfig) -> Any:
    """The agent a run's config names, with its model options and retry policy."""
    from themisto_env.agents import make_agent

    try:
        agent = make_agent(config.agent, **config.agent_kwargs())
    except TypeError as exc:  # options the agent does not take (e.g. --model for a baseline), or its own bug
        raise ConfigError(f"agent {config.agent!r} could not be made with these options: {exc}") from None
    if config.max_retries is not None and hasattr(agent, "retry"):  # the LLM agents' RetryPolicy
        agent.retry.max_retries = config.max_retries
    return agent


def env_options(config: RunConfig, agent: Any) -> dict[str, Any]:
    """The environment options a run uses (its observation mode defaults to the agent's)."""
    observation = config.observation or getattr(agent, "observation", None) or "static"
    return {
        "task": config.task,
        "dataset": config.data,
        "split": config.split,
        "backend": config.backend,
        "observation": observation,
        **config.env,
        "attempts": config.attempts,
    }


REFUSALS_BEFORE_SUBMISSION = 3
"""Tool calls past the budget the env refuses in a row before the runner submits an empty prediction for
the agent (the row says ``forced_submission``): an agent that never predicts cannot hold a run forever."""


class Episode:
    """The bookkeeping of one episode: which samples are left, each sample's predictions, its row.

    The loop asks the agent, steps the env and hands each step to `stepped`, which returns the
    sample's row once all its predictions are scored.

    With ``attempts=K`` in the env the agent is asked K times per sample (the env serves the same sample
    until its K-th prediction). The draws are independent, as pass@k assumes: each starts from the
    observation and ``info`` the first one started from, never from the previous draw's score.
    """

    def __init__(
        self,
        config: RunConfig,
        env: ThemistoEnv,
        agent: Any,
        options: dict[str, Any],
        tid: str,
        first: int,
        wanted: set[str],
    ) -> None:
        self.config, self.env, self.agent, self.options, self.wanted = config, env, agent, options, wanted
        self.tid, self.first = tid, first
        self.left = {s.id for s in env.episode.episode_samples[tid][first:]} & wanted
        self._begin_sample({})

    def _begin_sample(self, info: dict[str, Any]) -> None:
        self.drawn: list[Drawn] = []
        self.failed: list[str] = []  # the model errors of the current sample's predictions
        self.sample_info = info  # what the agent was shown when the current sample began
        self.started, self.started_at = time.perf_counter(), now()

    def reset(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset the env at the episode's first wanted sample, and the agent."""
        obs, info = self.env.reset(options={"trajectory": self.tid, "sample": self.first})
        self.agent.reset(info)
        self._begin_sample(info)
        return obs, info

    def wants_answer(self) -> bool:
        """Whether the agent is asked for the current sample (other samples get an empty prediction)."""
        sample = self.env.episode.current_sample
        return sample is not None and sample.id in self.wanted

    def model_failed(self, exc: ModelError) -> Prediction:
        """Record a model error as the current sample's; the empty prediction that moves the env on."""
        self.failed.append(str(exc))
        return Prediction(text="")

    def stepped(
        self, action: Any, reward: float, done: bool, info: dict[str, Any]
    ) -> tuple[ResultRow | None, dict[str, Any]]:
        """Take one env step's result: ``(the sample's row if it is now complete, the info to act on)``."""
        if "scored_sample_id" not in info:  # a tool call
            return None, info
        scored = StepInfo.model_validate(info)
        sample = next(s for s in self.env.episode.episode_samples[self.tid] if s.id == scored.scored_sample_id)
        self.drawn.append(Drawn(action, reward, scored, agent_record(self.agent)))
        if (scored.scored_draw or 0) + 1 < self.env.episode.config.attempts and not done:
            # The same sample again, as it began (the env serves its observation), as the next draw:
            # the agent starts afresh and never sees the previous draw's score.
            return None, {**self.sample_info, "draw": scored.draw}
        row = None
        if sample.id in self.wanted:
            self.left.discard(sample.id)
            model_error = self.failed[0] if self.failed else None
            row = make_row(
                self.config,
                self.options,
                sample,
                self.drawn,
                self.started,
                self.started_at,
                model_error,
                timing=self.env.episode.scored_seconds,
            )
        self._begin_sample(info)
        return row, info


async def aepisode_rows(
    config: RunConfig,
    env: ThemistoEnv,
    agent: Any,
    options: dict[str, Any],
    tid: str,
    first: int,
    wanted: Iterable[str],
    *,
    act: Act,
    call: Call,
    stop: threading.Event | None = None,
) -> AsyncIterator[ResultRow]:
    """One episode of ``env`` from sample ``first`` of trajectory ``tid``: a row per wanted sample, each as
    soon as its sample is scored. A model error is recorded as the sample's ``model_error`` and an empty
    prediction moves the env on. A set ``stop`` ends the episode before the next model call; the episode
    also ends after its last wanted sample, or with the trajectory.

    Args:
        config, env, agent, options: The run's config, the env, the agent and the env's options.
        tid, first, wanted: The trajectory, the sample to start at, the samples to score.
        act: How the agent is asked (`Act`).
        call: How the env is called (`Call`).
        stop: Ends the episode when set.
    """
    episode = Episode(config, env, agent, options, tid, first, set(wanted))
    obs, info = await call(episode.reset)
    refused = 0  # tool calls in a row the env refused (the sample's budget is spent)
    while episode.left and not (stop is not None and stop.is_set()):
        forced = refused >= REFUSALS_BEFORE_SUBMISSION
        try:
            if forced or not episode.wants_answer():
                action: Any = Prediction(text="")
            else:
                with env.episode.traced(), tracing.span("themisto.act", timed="model"):  # the agent: model time
                    decided = await act(obs, info)
                action = checked_action(decided, agent)  # ConfigError: not an action
        except ModelError as exc:
            action = episode.model_failed(exc)
        obs, reward, terminated, truncated, info = await call(env.step, action)
        refused = refused + 1 if info.get("tool_refused") else 0
        if forced:
            info = {**info, "forced_submission": True}
        row, info = episode.stepped(action, reward, terminated or truncated, info)
        if row is not None:
            yield row
        if terminated or truncated:
            break


async def in_place(function: Callable[..., T], *args: Any) -> T:
    """A `Call` that makes the blocking call right here (the loop never suspends on it)."""
    return function(*args)


def run_in_place(rows: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator whose awaits never suspend, in this thread and with no event loop.

    Each item is one ``send`` into the iterator's ``__anext__``; closing the returned iterator closes
    ``rows`` the same way.

    Raises:
        RuntimeError: ``rows`` suspended (awaited something that needs an event loop).
    """
    try:
        while True:
            step = rows.__anext__()
            try:
                step.send(None)  # type: ignore[attr-defined]
            except StopIteration as item:
                yield item.value
                continue
            except StopAsyncIteration:
                return
            with contextlib.suppress(GeneratorExit, StopIteration, StopAsyncIteration):
                step.throw(GeneratorExit)  # type: ignore[attr-defined]  # ends it where it waits, its cleanup run
            raise RuntimeError("an episode run in place awaited something that needs an event loop")
    finally:
        closing = rows.aclose()  # type: ignore[attr-defined]
        with contextlib.suppress(StopIteration, StopAsyncIteration):
            closing.send(None)


def episode_rows(
    config: RunConfig,
    env: ThemistoEnv,
    agent: Any,
    options: dict[str, Any],
    tid: str,
    first: int,
    wanted: Iterable[str],
) -> Iterator[ResultRow]:
    """`aepisode_rows` in this thread: the agent's ``act`` and the env's calls made in place."""

    async def act(observation: Any, info: dict[str, Any]) -> Any:
        return agent.act(observation, info)

    return run_in_place(aepisode_rows(config, env, agent, options, tid, first, wanted, act=act, call=in_place))


__all__ = [
    "REFUSALS_BEFORE_SUBMISSION",
    "Act",
    "Call",
    "Episode",
    "aepisode_rows",
    "env_options",
    "episode_rows",
    "in_place",
    "make_run_agent",
    "run_in_place",
]
