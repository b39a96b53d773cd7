"""Retrying model calls: one explicit policy for every provider.

A rate limit, a server error, a timeout or a lost connection is retried with exponential backoff and full
jitter, honouring the provider's ``Retry-After``; other failures are not, and a call that still fails raises
a one-line [`ModelError`][themisto_env.errors.ModelError]. The LLM agents switch the openai and anthropic
clients' own retries off, so this is the only policy. Errors are read by duck typing (status code, headers,
class and module names), so no provider package is imported here.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from themisto_env.errors import ModelError

T = TypeVar("T")

PROVIDER_MODULES = ("openai", "anthropic", "httpx", "httpcore", "ollama", "requests", "urllib3", "google", "groq")
"""Top-level modules whose exceptions are the provider's, not a bug of ours: they become ModelError."""


@dataclass
class RetryPolicy:
    """How model calls are retried.

    Attributes:
        max_retries: Further attempts after the first (0: no retries).
        base_delay: Seconds; the n-th retry waits a random time in ``[0, base_delay * 2**(n-1)]``.
        max_delay: The longest backoff wait, in seconds.
        max_retry_after: The longest wait a ``Retry-After`` header is honoured for, in seconds.
        sleep: The sync sleep (replaceable in tests).
        asleep: The async sleep (replaceable in tests).
        rng: The jitter's random numbers.
    """

    max_retries: int = 5
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 300.0
    sleep: Callable[[float], Any] = time.sleep
    asleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, retry: int, error: BaseException) -> float:
        """The wait before retry number ``retry`` (1-based) after ``error``."""
        after = retry_after(error)
        if after is not None:
            return min(max(after, 0.0), self.max_retry_after)
        return self.rng.uniform(0.0, min(self.max_delay, self.base_delay * 2 ** (retry - 1)))


def status_of(error: BaseException) -> int | None:
    """The HTTP status of a provider error, if it carries one."""
    for holder in (error, getattr(error, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int):
            return status
    return None


def retry_after(error: BaseException) -> float | None:
    """The wait a provider asked for (``retry-after-ms`` or ``Retry-After``), in seconds, if any."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return float(millis) / 1000
        value = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def is_retryable(error: BaseException) -> bool:
    """A rate limit, a server error, a timeout or a lost connection: worth another attempt."""
    status = status_of(error)
    if status is not None:
        return status in (408, 409, 429) or status >= 500
    if isinstance(error, (TimeoutError, ConnectionError)):
        return True
    names = [cls.__name__ for cls in type(error).__mro__]
    return any("Timeout" in name or "Connect" in name for name in names)


def _provider_module(name: str) -> bool:
    top = name.split(".")[0]
    return top in PROVIDER_MODULES or (top.startswith("langchain_") and top != "langchain_core")


def is_provider_error(error: BaseException) -> bool:
    """An error of the provider or its transport (not a bug of ours), which ends in a ModelError: it
    carries an HTTP status, is retryable, is a reply that is not JSON, is a provider package's exception,
    or was raised in a provider package's code (a malformed reply the client could not read)."""
    if status_of(error) is not None or is_retryable(error) or isinstance(error, json.JSONDecodeError):
        return True
    if _provider_module(type(error).__module__):
        return True
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:  # where it was raised
        frame = frame.tb_next
    return frame is not None and _provider_module(str(frame.tb_frame.f_globals.get("__name__", "")))


def describe(error: BaseException, *, provider: str | None = None, attempts: int = 1) -> str:
    """One line for a failed model call: provider, status, the provider's message, attempts."""
    status = status_of(error)
    message = _provider_message(error) or type(error).__name__
    where = f"{provider} " if provider else ""
    if status is not None and status < 400:  # answered, but the reply could not be read
        what = f"malformed reply, HTTP {status}"
    elif status is not None:
        what = f"HTTP {status}"
    else:
        what = type(error).__name__
    tries = f"after {attempts} attempts" if attempts > 1 else "not retried" if not is_retryable(error) else "1 attempt"
    line = f"{where}model call failed ({what}, {tries}): {message}"
    return " ".join(line.split())[:500]


def _provider_message(error: BaseException) -> str:
    body = getattr(error, "body", None)  # openai / anthropic: the parsed JSON error body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return str(error)


RetryHook = Callable[[BaseException, float], None]
"""Told of each retry before its wait: the error, and the seconds it waits (to count or show retries)."""


def call_with_retries(
    call: Callable[[], T], policy: RetryPolicy, *, provider: str | None = None, on_retry: RetryHook | None = None
) -> T:
    """Make a model call, retrying it under ``policy`` (``on_retry`` is told of each retry).

    Raises:
        ModelError: The call still failed after its retries, or failed in a way retrying cannot mend.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as error:
            wait = _next_wait(error, attempt, policy, provider)
            if on_retry is not None:
                on_retry(error, wait)
        policy.sleep(wait)


async def acall_with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    provider: str | None = None,
    on_retry: RetryHook | None = None,
) -> T:
    """The async form of `call_with_retries`."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return await call()
        except Exception as error:
            wait = _next_wait(error, attempt, policy, provider)
            if on_retry is not None:
                on_retry(error, wait)
        await policy.asleep(wait)


def _next_wait(error: Exception, attempt: int, policy: RetryPolicy, provider: str | None) -> float:
    """The wait before the next attempt; raises when there is none (the error is ours, or final)."""
    if not is_provider_error(error):
        raise error
    if not is_retryable(error) or attempt > policy.max_retries:
        raise ModelError(
            describe(error, provider=provider, attempts=attempt), status=status_of(error), attempts=attempt
        ) from error
    return policy.delay(attempt, error)


__all__ = [
    "RetryHook",
    "RetryPolicy",
    "acall_with_retries",
    "call_with_retries",
    "describe",
    "is_provider_error",
    "is_retryable",
    "retry_after",
    "status_of",
]
