"""LLM agents on any langchain-core ``BaseChatModel``, one per kind of context.

``llm-static`` (`StaticContextAgent`) sees the history only; ``llm-full`` (`FullRuntimeAgent`) the history
and the env's runtime dump; ``llm-tools`` (`ToolUsingAgent`) the history and the observation tools bound to
the model. Each is made from a chat model, or from a provider and a model name (`make_chat_model`). Every
model call goes through `call_model`: the response cache (`themisto_env.agents.cache`), then
`call_with_retries`; a reply is read with `extract_prediction`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from themisto_env import tracing
from themisto_env.agents.base import BaseAgent, Info, Observation
from themisto_env.agents.cache import ResponseCache, is_cached, request_key
from themisto_env.agents.parsing import extract_prediction
from themisto_env.agents.prompting import ContextMode, PromptTemplates, load_prompts
from themisto_env.agents.retry import RetryPolicy, acall_with_retries, call_with_retries, status_of
from themisto_env.agents.transcript import message_text, transcript
from themisto_env.env import Action
from themisto_env.env.actions import Prediction
from themisto_env.errors import ConfigError
from themisto_env.redaction import without_secrets

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage


DEFAULT_TIMEOUT_S = 120.0
"""Seconds a model call may take (openai and anthropic, unless ``timeout=`` is given); then it is retried."""


class LLMAgent(BaseAgent):
    """An agent asking a chat model with the prompt of its context mode (see the subclasses).

    Args:
        chat_model: The model; or give ``provider`` and ``model`` instead.
        provider: A provider of `make_chat_model`.
        model: The provider's model name.
        prompts: A prompt-templates YAML file (default: the bundled ``prompts/default.yaml``).
        max_retries: Retries of a failed model call (rate limit, 5xx, timeout, lost connection).
        retry_delay: The backoff's base delay in seconds (see `RetryPolicy`).
        cache: A response-cache file (or an open `ResponseCache`): replies
            are replayed from it when the same call was made before, and stored in it otherwise. None: no
            cache.
        **model_options: Passed to the provider's model class (``temperature``, ``base_url``, ...).

    Raises:
        ConfigError: Neither a chat model nor a provider, or both.
        ProviderError: The provider's package or key is missing.
        DataError: The cache file is not a readable response cache.

    Attributes:
        retry: The retry policy of the model calls (replaceable, e.g. its ``sleep`` in tests).
        cache: The response cache, or None.
        limiter: An ``asyncio.Semaphore`` the async model calls hold while in flight (the runner shares
            one between concurrent episodes to bound the connections); None for no bound.
    """

    name = "llm"
    mode: ClassVar[ContextMode] = "static"
    needs_model: ClassVar[bool] = True
    """Made from a model (``--model``): ``themisto agents`` says so."""

    def __init__(
        self,
        chat_model: BaseChatModel | None = None,
        *,
        provider: str | None = None,
        model: str | None = None,
        prompts: str | Path | None = None,
        max_retries: int = 5,
        retry_delay: float = 1.0,
        cache: str | Path | ResponseCache | None = None,
        **model_options: Any,
    ) -> None:
        super().__init__()
        self.retry = RetryPolicy(max_retries=max_retries, base_delay=retry_delay)
        self.cache = ResponseCache(cache) if isinstance(cache, str | Path) else cache
        self.provider = provider
        self.limiter: asyncio.Semaphore | None = None
        self._model_given = model
        self._model_params = without_secrets(model_options)
        if chat_model is not None and (provider is not None or model_options):
            raise ConfigError(f"{self.name}: pass either chat_model or provider/model options, not both")
        if chat_model is None:
            if provider is None:
                raise ConfigError(
                    f"{self.name} needs a model: --model PROVIDER/NAME on the command line (e.g. --model "
                    "openai/gpt-4o-mini, --model fake for a scripted one), model: in a config, or in code "
                    "chat_model=... or provider=... and model=..."
                )
            from themisto_env.agents.providers import make_chat_model

            if provider in ("openai", "anthropic"):  # one retry policy: ours (see agents/retry.py)
                model_options.setdefault("max_retries", 0)
                # a hung call is a timeout (retried), never a run that waits forever
                model_options.setdefault("timeout", DEFAULT_TIMEOUT_S)
            chat_model = make_chat_model(provider, model, **model_options)
        self.chat_model: BaseChatModel = chat_model
        self.prompts: PromptTemplates = load_prompts(prompts)

    def messages(self, observation: Observation, task: str, mode: ContextMode | None = None) -> list[BaseMessage]:
        """The system and user messages for an observation.

        Args:
            observation: The env's observation.
            task: ``next-cell`` or ``output``.
            mode: The context to include (default: the agent's).

        Returns:
            ``[SystemMessage, HumanMessage]``.
        """
        from langchain_core.messages import HumanMessage, SystemMessage

        return [
            SystemMessage(self.prompts.system_text(task)),
            HumanMessage(self.prompts.user_text(observation, task, mode or self.mode)),
        ]

    def model_record(self) -> dict[str, Any]:
        """``{"provider", "name", "params"}``: the model, as a run's rows record it (no secret in it)."""
        params = json.loads(json.dumps(self._model_params, default=repr))  # plain JSON, no secret in it
        name = self._model_given or self._model_name() or None
        return {"provider": self.provider or type(self.chat_model).__name__, "name": name, "params": params}

    def record(self, message: Any) -> None:
        """Count a model call and the tokens its ``usage_metadata`` reports (a cached reply as a cached call)."""
        usage = getattr(message, "usage_metadata", None) or {}
        self.usage.add_model_call(usage.get("input_tokens"), usage.get("output_tokens"), cached=is_cached(message))

    def retried(self, error: BaseException, wait: float) -> None:
        """Count a retry of a model call in `usage` (shown in the run's usage line)."""
        self.usage.retries += 1
        self.usage.rate_limited += status_of(error) == 429

    def model_span(self) -> Any:
        """A span over one model call, named and described by OpenTelemetry's GenAI conventions (``chat
        MODEL``; ``gen_ai.system``, ``gen_ai.request.model``; the tokens and retries are added by
        `traced_reply`)."""
        name = self._model_given or self._model_name() or type(self.chat_model).__name__
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": self.provider or type(self.chat_model).__name__,
            "gen_ai.provider.name": self.provider or type(self.chat_model).__name__,
            "gen_ai.request.model": name,
        }
        return tracing.span(f"chat {name}", attributes)

    def traced_reply(self, span: Any, reply: Any, retries_before: int) -> Any:
        """Add a reply's tokens, its retries (`usage`'s retries less ``retries_before``) and whether it
        came from the cache to its model call's span; return the reply."""
        if span.is_recording():
            usage = getattr(reply, "usage_metadata", None) or {}
            tracing.record(
                span,
                {
                    "gen_ai.usage.input_tokens": usage.get("input_tokens"),
                    "gen_ai.usage.output_tokens": usage.get("output_tokens"),
                    "gen_ai.response.model": (getattr(reply, "response_metadata", None) or {}).get("model_name"),
                    "themisto.model.retries": self.usage.retries - retries_before,
                    "themisto.model.cached": is_cached(reply),
                },
            )
        return reply

    def call_model(self, model: Any, messages: list[BaseMessage]) -> Any:
        """``model.invoke(messages)``, retried under `retry`; replayed from `cache` if stored.
        Traced as one span (`model_span`).

        Raises:
            ModelError: The call still failed after its retries, or cannot succeed (400, 401, ...).
            DataError: The cache file cannot be read or written.
        """
        retries = self.usage.retries
        with self.model_span() as span:
            return self.traced_reply(span, self._call_model(model, messages), retries)

    def _call_model(self, model: Any, messages: list[BaseMessage]) -> Any:
        cache = self.cache
        key = self.cache_key(model, messages) if cache is not None else ""
        reply = cache.get(key) if cache is not None else None
        if reply is None:
            reply = call_with_retries(
                lambda: model.invoke(messages), self.retry, provider=self.provider, on_retry=self.retried
            )
            if cache is not None:
                cache.put(key, reply, provider=self.provider or "", model=self._model_name())
        return reply

    async def acall_model(self, model: Any, messages: list[BaseMessage]) -> Any:
        """The async form of `call_model` (``model.ainvoke``), holding `limiter` while it calls."""
        retries = self.usage.retries
        with self.model_span() as span:
            return self.traced_reply(span, await self._acall_model(model, messages), retries)

    async def _acall_model(self, model: Any, messages: list[BaseMessage]) -> Any:
        # the cache's file is read and written in a thread: a busy file never blocks the event loop
        cache = self.cache
        key = self.cache_key(model, messages) if cache is not None else ""
        reply = await asyncio.to_thread(cache.get, key) if cache is not None else None
        if reply is None:
            async with self.limiter or contextlib.nullcontext():
                reply = await acall_with_retries(
                    lambda: model.ainvoke(messages), self.retry, provider=self.provider, on_retry=self.retried
                )
            if cache is not None:
                await asyncio.to_thread(cache.put, key, reply, provider=self.provider or "", model=self._model_name())
        return reply

    def cache_key(self, model: Any, messages: list[BaseMessage]) -> str:
        """The response-cache key of a call (`request_key`), for the
        current draw of the current sample (pass@k's draws are independent, so each has its own entries)."""
        current = self._sample_id
        draw = current[1] if isinstance(current, tuple) and isinstance(current[1], int) else 0
        return request_key(model, messages, draw=draw)

    def _model_name(self) -> str:
        return str(getattr(self.chat_model, "model_name", None) or getattr(self.chat_model, "model", None) or "")

    def decide(self, observation: Observation, info: Info) -> Action:
        """Ask the model once and read its prediction."""
        task = str(info["task"])
        messages = self.messages(observation, task)
        reply = self.call_model(self.chat_model, messages)
        self.record(reply)
        self.transcript = transcript([*messages, reply])
        return Prediction(text=extract_prediction(message_text(reply), task))  # type: ignore[arg-type]

    async def adecide(self, observation: Observation, info: Info) -> Action:
        """Async `decide` (the model's ``ainvoke``)."""
        task = str(info["task"])
        messages = self.messages(observation, task)
        reply = await self.acall_model(self.chat_model, messages)
        self.record(reply)
        self.transcript = transcript([*messages, reply])
        return Prediction(text=extract_prediction(message_text(reply), task))  # type: ignore[arg-type]


class StaticContextAgent(LLMAgent):
    """``llm-static``: the model sees the history (and the cell about to run), nothing of the state."""

    name = "llm-static"
    mode = "static"
    observation = "static"


class FullRuntimeAgent(LLMAgent):
    """``llm-full``: the model also sees the env's dump of every variable and the memory."""

    name = "llm-full"
    mode = "full"
    observation = "full"


__all__ = ["FullRuntimeAgent", "LLMAgent", "StaticContextAgent"]
