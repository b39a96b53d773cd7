"""Traces of where time goes: OpenTelemetry spans that cost nothing when tracing is off.

Each layer marks its work with [span][themisto_env.tracing.span]. Tracing is on when a tracer provider is set:
by [configured][themisto_env.trace_export.configured] (the `OTEL_*` variables, `themisto run --trace FILE`),
by [set_provider][themisto_env.tracing.set_provider], or by the application. Otherwise `span` hands back one
shared no-op object and imports nothing: `opentelemetry-api` is needed to trace, the sdk (the `trace` extra)
to export. Spans that name a `timed` kind also add their own seconds to the current
[Stopwatch][themisto_env.tracing.Stopwatch] (traced or not). The spans are listed in docs/observability.md.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any

from themisto_env._version import __version__

TRACER_NAME = "themisto_env"
"""The instrumentation scope of every span."""

Attributes = Mapping[str, Any]
"""Span attributes: str, bool, int, float, or sequences of them (a None value is left out)."""


class _NoSpan:
    """The span while tracing is off (what hooks call on an OpenTelemetry `Span`): every call does nothing;
    also its own context manager."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN = _NoSpan()
"""The one span of tracing off (nothing is recorded)."""


class Stopwatch:
    """Seconds spent per kind of work (`state`, `tools`, `model`, `scoring`), each kind's own time: a timed
    span inside another counts for its kind and not for the outer one's.

    Args:
        clock: Seconds from a monotonic clock (default `time.perf_counter`).

    One stopwatch serves one episode at a time (one thread at a time). `totals` only grows: take a
    [mark][themisto_env.tracing.Stopwatch.mark] when a sample begins and ask
    [since][themisto_env.tracing.Stopwatch.since] when it ends.
    """

    __slots__ = ("_now", "_open", "totals")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.totals: dict[str, float] = {}
        self._now = clock  # seconds, monotonic
        self._open: list[list[Any]] = []  # [kind, started, seconds of timed work inside]

    def enter(self, kind: str) -> None:
        """Timed work of `kind` begins (ended by [leave][themisto_env.tracing.Stopwatch.leave])."""
        self._open.append([kind, self._now(), 0.0])

    def leave(self) -> None:
        """The innermost timed work ends: its own seconds are added to its kind."""
        kind, started, inside = self._open.pop()
        spent = self._now() - started
        self.totals[kind] = self.totals.get(kind, 0.0) + spent - inside
        if self._open:
            self._open[-1][2] += spent

    def mark(self) -> dict[str, float]:
        """The totals now (for [since][themisto_env.tracing.Stopwatch.since])."""
        return dict(self.totals)

    def since(self, mark: Mapping[str, float]) -> dict[str, float]:
        """Seconds per kind spent since `mark` (kinds with none left out)."""
        return {k: v - mark.get(k, 0.0) for k, v in self.totals.items() if v - mark.get(k, 0.0) > 0}


_clock: ContextVar[Stopwatch | None] = ContextVar("themisto_stopwatch", default=None)
_untraced: ContextVar[bool] = ContextVar("themisto_untraced", default=False)
_provider: Any = None  # set_provider's (None: the global one)
_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer)


def set_provider(provider: Any) -> None:
    """Trace to `provider` (an sdk `TracerProvider`) rather than OpenTelemetry's global one; None goes back
    to the global one. For tests and embedding applications; a run is traced by
    [configured][themisto_env.trace_export.configured]."""
    global _provider
    _provider = provider


@functools.cache
def _provider_named() -> bool:
    """Whether `OTEL_PYTHON_TRACER_PROVIDER` names a provider for the api to load (read once)."""
    return bool(os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"))


def _tracer() -> Any:
    """The tracer, or None while tracing is off (no provider set: the api's proxy or no-op, or no api)."""
    global _cached
    provider = _provider
    if provider is None:
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:  # nobody imported OpenTelemetry: nobody set a provider
            return None
        try:  # the global provider, None until set: read as is (get_tracer_provider looks up a variable, 3.5 µs)
            provider = trace._TRACER_PROVIDER
        except AttributeError:  # another version of the api
            provider = None
        if provider is None:
            if not _provider_named():
                return None
            provider = trace.get_tracer_provider()  # OTEL_PYTHON_TRACER_PROVIDER names one: the api loads it
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None
    cached_provider, tracer = _cached
    if cached_provider is not provider:
        tracer = provider.get_tracer(TRACER_NAME, __version__)
        _cached = (provider, tracer)
    return tracer


def enabled() -> bool:
    """Whether spans are recorded now (a tracer provider is set)."""
    return _tracer() is not None


def _clean(attributes: Attributes | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {k: v for k, v in attributes.items() if v is not None}


class _Span:
    """A span made current for a block, and its seconds on the current stopwatch (see `span`)."""

    __slots__ = ("_attributes", "_clock", "_errors", "_name", "_span", "_timed", "_token", "_tracer")

    def __init__(
        self, tracer: Any, name: str, attributes: Attributes | None, timed: str | None, errors: type | tuple
    ) -> None:
        self._tracer, self._name, self._attributes, self._timed, self._errors = tracer, name, attributes, timed, errors
        self._clock: Stopwatch | None = None
        self._span: Any = NO_SPAN
        self._token: Token | None = None

    def __enter__(self) -> Any:
        if self._tracer is not None:
            from opentelemetry import context, trace

            self._span = self._tracer.start_span(self._name, attributes=_clean(self._attributes))
            self._token = context.attach(trace.set_span_in_context(self._span))
        if self._timed is not None:
            self._clock = _clock.get()
            if self._clock is not None:
                self._clock.enter(self._timed)
        return self._span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._clock is not None:
            self._clock.leave()
        if self._tracer is not None:
            from opentelemetry import context

            if error is not None:
                self._span.record_exception(error)
                if isinstance(error, self._errors):
                    _error_status(self._span, error)
            self._span.end()
            if self._token is not None:
                context.detach(self._token)


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    timed: str | None = None,
    errors: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> Any:
    """A span over a block (`with span(...) as s:`), a child of the current span; its seconds count for
    `timed` on the current stopwatch (see [within][themisto_env.tracing.within]), less the timed spans inside.

    ```python
    with tracing.span("themisto.tool_call", {"themisto.tool.name": call.tool}, timed="tools") as span:
        ...
        tracing.fail(span, error)  # a fault caught inside: the span's status is ERROR, the exception recorded
    ```

    Args:
        name: The span's name (`themisto.state.serve`, `chat gpt-4o`, ...).
        attributes: Its attributes at the start (None values left out).
        timed: The stopwatch kind its time counts for (`state`, `tools`, `model`, `scoring`), if any.
        errors: Exceptions leaving the block that make the span's status ERROR (every exception is
            recorded as an event); e.g. only `InfrastructureError` for a helper call, whose refusals
            (an unknown name) are answers, not faults.

    Returns:
        A context manager giving the span ([NO_SPAN][themisto_env.tracing.NO_SPAN] while tracing is off).
    """
    tracer = None if _untraced.get() else _tracer()
    if tracer is None and (timed is None or _clock.get() is None):
        return NO_SPAN
    return _Span(tracer, name, attributes, timed, errors)


@contextmanager
def untraced() -> Iterator[None]:
    """No spans in this block (this thread or task): work done ahead of time for no one yet, such as a spare
    kernel forked in the background, would otherwise show as a trace of its own, outside every episode."""
    token = _untraced.set(True)
    try:
        yield
    finally:
        _untraced.reset(token)


def timed(kind: str) -> Any:
    """Count a block's seconds for `kind` on the current stopwatch, without a span of its own."""
    if _clock.get() is None:
        return NO_SPAN
    return _Span(None, "", None, kind, ())


def record(span: Any, attributes: Attributes) -> None:
    """Set attributes on a span known only later (a route, a score, tokens); None values left out."""
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


def current() -> Any:
    """The current span ([NO_SPAN][themisto_env.tracing.NO_SPAN] while tracing is off)."""
    if _tracer() is None:
        return NO_SPAN
    from opentelemetry import trace

    return trace.get_current_span()


def _error_status(span: Any, error: BaseException | str) -> None:
    from opentelemetry.trace import Status, StatusCode

    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    span.set_status(Status(StatusCode.ERROR, text))


def fail(span: Any, error: BaseException | str) -> None:
    """A fault met in the span and handled there (a killed kernel recovered from): the span's status
    becomes ERROR and the exception is recorded."""
    if not span.is_recording():
        return
    if isinstance(error, BaseException):
        span.record_exception(error)
    _error_status(span, error)


def start(name: str, attributes: Attributes | None = None) -> Any:
    """A span started now and not made current (an episode's, ended by [end][themisto_env.tracing.end]);
    [NO_SPAN][themisto_env.tracing.NO_SPAN] while tracing is off. Its children are made under
    [within][themisto_env.tracing.within]."""
    tracer = _tracer()
    if tracer is None:
        return NO_SPAN
    return tracer.start_span(name, attributes=_clean(attributes))


def end(span: Any, attributes: Attributes | None = None) -> None:
    """End a span of [start][themisto_env.tracing.start], with its last attributes."""
    if span.is_recording():
        if attributes:
            record(span, attributes)
        span.end()


class _Within:
    __slots__ = ("_clock", "_clock_token", "_span", "_token")

    def __init__(self, span: Any, clock: Stopwatch | None) -> None:
        self._span, self._clock = span, clock
        self._token: Token | None = None
        self._clock_token: Token | None = None

    def __enter__(self) -> None:
        if self._clock is not None:
            self._clock_token = _clock.set(self._clock)
        if self._span.is_recording():
            from opentelemetry import context, trace

            self._token = context.attach(trace.set_span_in_context(self._span))

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            from opentelemetry import context

            context.detach(self._token)
        if self._clock_token is not None:
            _clock.reset(self._clock_token)


def within(span: Any, clock: Stopwatch | None = None) -> _Within:
    """Make `span` current for a block (its spans are its children) and `clock` the stopwatch timed spans
    count on."""
    return _Within(span, clock)


__all__ = [
    "NO_SPAN",
    "TRACER_NAME",
    "Attributes",
    "Stopwatch",
    "current",
    "enabled",
    "end",
    "fail",
    "record",
    "set_provider",
    "span",
    "start",
    "timed",
    "untraced",
    "within",
]
