"""The agent protocol: what a runner needs from a policy, and a base class that does the bookkeeping.

[`Agent`][themisto_env.agents.Agent] is the contract (a `typing.Protocol`: any object with these members is
an agent). [`BaseAgent`][themisto_env.agents.BaseAgent] implements it for the common case: subclass it, set
``name``, write ``decide`` (docs/agents.md shows a whole agent and how to register it).
[`AgentUsage`][themisto_env.agents.AgentUsage] is what an agent spent on one sample; a new one starts with
each new ``info["sample_id"]`` or ``info["draw"]``, or on ``reset``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Protocol, runtime_checkable

from themisto_env.env.actions import Action, Prediction
from themisto_env.env.tools import ToolCall
from themisto_env.errors import ConfigError

Observation = Mapping[str, Any]
Info = Mapping[str, Any]


@dataclass
class AgentUsage:
    """What an agent spent on one sample.

    Attributes:
        model_calls: Calls to a language model (0 for non-LLM agents).
        input_tokens: Prompt tokens over those calls, where the model reports them.
        output_tokens: Completion tokens over those calls, where the model reports them.
        tokens_reported: Whether every model call (and cached reply) reported its token counts; when False
            the token fields are lower bounds (or 0 when no call reported them).
        tool_calls: Tool calls the agent made (each one env step).
        cached_calls: Model replies replayed from a response cache (``cache=``): no call made, no token
            spent, not counted in ``model_calls``.
        cached_input_tokens: Prompt tokens the original calls of those replies used (what the cache saved).
        cached_output_tokens: Completion tokens the original calls of those replies used.
        retries: Model calls made again after a failure (rate limit, 5xx, timeout): not in ``model_calls``.
        rate_limited: Those of them after a rate limit (HTTP 429).
    """

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tokens_reported: bool = True
    tool_calls: int = 0
    cached_calls: int = 0
    cached_input_tokens: int = 0
    cached_output_tokens: int = 0
    retries: int = 0
    rate_limited: int = 0

    def add_model_call(
        self, input_tokens: int | None = None, output_tokens: int | None = None, *, cached: bool = False
    ) -> None:
        """Count one model call and the tokens it reported (None where it reported none); ``cached``: a reply
        replayed from a response cache, with the tokens its original call reported."""
        if input_tokens is None or output_tokens is None:
            self.tokens_reported = False
        if cached:
            self.cached_calls += 1
            self.cached_input_tokens += input_tokens or 0
            self.cached_output_tokens += output_tokens or 0
        else:
            self.model_calls += 1
            self.input_tokens += input_tokens or 0
            self.output_tokens += output_tokens or 0

    def __add__(self, other: AgentUsage) -> AgentUsage:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        return AgentUsage(**{**summed, "tokens_reported": self.tokens_reported and other.tokens_reported})

    def as_dict(self) -> dict[str, Any]:
        """The usage as a plain dict (for a results line)."""
        return asdict(self)


@runtime_checkable
class Agent(Protocol):
    """A policy for the Themisto environment.

    Attributes:
        name: The agent's registered name (results are labelled with it).
        usage: What the agent spent on the current sample so far; after ``act`` returns a
            [`Prediction`][themisto_env.env.Prediction], the usage of the sample just predicted.
    """

    name: str
    usage: AgentUsage

    def reset(self, info: Info) -> None:
        """Start an episode (called after ``env.reset`` with its ``info``)."""
        ...

    def act(self, observation: Observation, info: Info) -> Action:
        """Choose the next action: a tool call (``tools`` mode) or the prediction for the sample."""
        ...


class BaseAgent:
    """Bookkeeping for agents: per-sample usage, sample changes, and an async ``aact``.

    Subclasses set `name` and implement [`decide`][themisto_env.agents.BaseAgent.decide] (and, for real async work,
    [`adecide`][themisto_env.agents.BaseAgent.adecide]); they may override
    [`start_episode`][themisto_env.agents.BaseAgent.start_episode] and
    [`start_sample`][themisto_env.agents.BaseAgent.start_sample].

    Attributes:
        name: The agent's name.
        observation: The observation mode the agent is written for (``static``, ``full``, ``tools``),
            or None when any mode works. A runner should create the env in this mode.
        usage: What the agent spent on the current sample.
        transcript: The conversation of the current prediction (``{"role", "content", ...}`` messages, see
            `message_record`), kept in the run's results; None for
            agents without one.
    """

    name: str = "agent"
    observation: ClassVar[str | None] = None

    def __init__(self) -> None:
        self.usage = AgentUsage()
        self.transcript: list[dict[str, Any]] | None = None
        self._sample_id: object = None  # (sample id, draw) being decided

    # -- the protocol ------------------------------------------------------------------------------

    def reset(self, info: Info) -> None:
        """Start an episode: forget the previous sample and call
        [`start_episode`][themisto_env.agents.BaseAgent.start_episode].

        Warns when the env's observation mode is not the one the agent is written for.
        """
        mode = info.get("observation_mode")
        if self.observation is not None and mode is not None and mode != self.observation:
            warnings.warn(
                f"the {self.name} agent is written for the {self.observation!r} observation mode, but the env "
                f"is in {mode!r}: make the env with observation={self.observation!r}",
                stacklevel=2,
            )
        self._sample_id = None
        self.usage = AgentUsage()
        self.start_episode(info)

    def act(self, observation: Observation, info: Info) -> Action:
        """Choose the next action (see [`decide`][themisto_env.agents.BaseAgent.decide]), counting tool calls in
        `usage`."""
        self._enter(observation, info)
        return self._count(self.decide(observation, info))

    async def aact(self, observation: Observation, info: Info) -> Action:
        """The async form of [`act`][themisto_env.agents.BaseAgent.act] (see
        [`adecide`][themisto_env.agents.BaseAgent.adecide])."""
        self._enter(observation, info)
        return self._count(await self.adecide(observation, info))

    # -- for subclasses ----------------------------------------------------------------------------

    def decide(self, observation: Observation, info: Info) -> Action:
        """The agent's policy: the next action for this observation.

        Args:
            observation: The env's observation (``history``, ``cell``, ``runtime``, ``tool_result``,
                ``tools_left``).
            info: The env's info (``sample_id``, ``task``, ``observation_mode``, ``tool_names``, ...).

        Returns:
            A [`ToolCall`][themisto_env.env.tools.ToolCall] (only when ``observation["tools_left"] > 0`` and the
            env is in ``tools`` mode) or a [`Prediction`][themisto_env.env.Prediction].
        """
        raise NotImplementedError

    async def adecide(self, observation: Observation, info: Info) -> Action:
        """Async [`decide`][themisto_env.agents.BaseAgent.decide]; by default it calls
        [`decide`][themisto_env.agents.BaseAgent.decide]."""
        return self.decide(observation, info)

    def start_episode(self, info: Info) -> None:
        """Called by [`reset`][themisto_env.agents.BaseAgent.reset]; does nothing by default."""

    def start_sample(self, observation: Observation, info: Info) -> None:
        """Called before the first [`decide`][themisto_env.agents.BaseAgent.decide] of each sample; does nothing by
        default."""

    # -- internals ---------------------------------------------------------------------------------

    def _enter(self, observation: Observation, info: Info) -> None:
        # A new sample, or another independent prediction of the same one (pass@k: ``info["draw"]``):
        # either starts afresh, with nothing carried over from the previous attempt.
        key = (info.get("sample_id"), info.get("draw", 0))
        if key != self._sample_id:
            self._sample_id = key
            self.usage = AgentUsage()
            self.transcript = None
            self.start_sample(observation, info)

    def _count(self, action: Action) -> Action:
        if isinstance(action, ToolCall):
            self.usage.tool_calls += 1
        return action


def checked_action(action: object, agent: object) -> Action | Mapping[str, Any]:
    """What an agent returned, if it is an action: a [`Prediction`][themisto_env.env.Prediction], a
    [`ToolCall`][themisto_env.env.tools.ToolCall], or the env's raw form of one (a mapping with ``kind``).

    The env answers a malformed action in ``tool_result`` (a policy being trained must not crash it), but
    an agent that returns something else altogether (a string, None) is a bug in the agent, not an answer:
    the runner stops on it rather than score an empty prediction for every sample.

    Raises:
        ConfigError: Anything else (the message names the agent and the type it returned).
    """
    if isinstance(action, Prediction | ToolCall) or (isinstance(action, Mapping) and "kind" in action):
        return action
    name = getattr(agent, "name", None) or type(agent).__name__
    shown = repr(action)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise ConfigError(
        f"agent {name!r} returned a {type(action).__name__} ({shown}), not an action: return "
        "Prediction(text=...) to predict, or ToolCall(tool=..., args={...}) to query the kernel"
    )


__all__ = ["Agent", "AgentUsage", "BaseAgent", "Info", "Observation", "checked_action"]
