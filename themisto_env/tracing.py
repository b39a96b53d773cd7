"""Traces of where time goes: OpenTelemetry spans that cost nothing when tracing is off.

Each layer marks its work with [span][themisto_env.tracing.span], a context manager:

```python
with tracing.span("themisto.tool_call", {"themisto.tool.name": call.tool}, timed="tools") as span:
    ...
    tracing.fail(span, error)  # a fault caught inside: the span's status is ERROR, the exception recorded
```

Tracing is on when a tracer provider is set: by [configured][themisto_env.tracing.configured] (the
`OTEL_*` variables, `themisto run --trace FILE`), by [set_provider][themisto_env.tracing.set_provider], or
by the application (`opentelemetry.trace.set_tracer_provider`, `opentelemetry-instrument`). Otherwise
`span` hands back one shared no-op object and imports nothing: only `opentelemetry-api` is needed to
trace at all, and the sdk (the `trace` extra: `pip install 'themisto-env[trace]'`) to export.

Spans that name a `timed` kind also add their seconds to the [Stopwatch][themisto_env.tracing.Stopwatch]
made current by [within][themisto_env.tracing.within] (traced or not): an episode's clock of where a
sample's time went (state, tools, model, scoring), each span's own time, less the timed spans inside it.

The spans (names and attributes) are listed in docs/observability.md.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

from themisto_env._version import __version__
from themisto_env.errors import ConfigError

TRACER_NAME = "themisto_env"
"""The instrumentation scope of every span."""
INSTALL_HINT = "pip install 'themisto-env[trace]'"
"""How to install what exporting traces needs."""
TRACE_FILE_VARIABLE = "THEMISTO_TRACE_FILE"
"""Where [configured][themisto_env.tracing.configured] tells worker processes to write spans (JSON lines)."""

Attributes = Mapping[str, Any]
"""Span attributes: str, bool, int, float, or sequences of them (a None value is left out)."""


class SpanLike(Protocol):
    """What hooks call on a span: an OpenTelemetry `Span`, or [NO_SPAN][themisto_env.tracing.NO_SPAN]."""

    def set_attribute(self, key: str, value: Any) -> None: ...

    def is_recording(self) -> bool: ...


class _NoSpan:
    """The span while tracing is off: every call does nothing; also its own context manager."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Attributes) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Attributes | None = None) -> None:
        pass

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def end(self) -> None:
        pass

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

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Time a block as `kind` (without a span)."""
        self.enter(kind)
        try:
            yield
        finally:
            self.leave()

    def mark(self) -> dict[str, float]:
        """The totals now (for [since][themisto_env.tracing.Stopwatch.since])."""
        return dict(self.totals)

    def since(self, mark: Mapping[str, float]) -> dict[str, float]:
        """Seconds per kind spent since `mark` (kinds with none left out)."""
        return {k: v - mark.get(k, 0.0) for k, v in self.totals.items() if v - mark.get(k, 0.0) > 0}


_clock: ContextVar[Stopwatch | None] = ContextVar("themisto_stopwatch", default=None)
_lock = threading.Lock()
_provider: Any = None  # set_provider's (None: the global one)
_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer)


def set_provider(provider: Any) -> None:
    """Trace to `provider` (an sdk `TracerProvider`) rather than OpenTelemetry's global one; None goes back
    to the global one. For tests and embedding applications; a run is traced by
    [configured][themisto_env.tracing.configured]."""
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
    `timed` on the current stopwatch (see [within][themisto_env.tracing.within]).

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
    tracer = _tracer()
    if tracer is None and (timed is None or _clock.get() is None):
        return NO_SPAN
    return _Span(tracer, name, attributes, timed, errors)


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


# -- exporting ---------------------------------------------------------------------------------------------


def span_record(span: Any) -> dict[str, Any]:
    """One finished span (an sdk `ReadableSpan`) as a JSON-able dict: its name, ids (hex), start and end
    (Unix nanoseconds), duration, status, attributes and events (an exception's among them)."""
    context, parent = span.context, span.parent
    status = span.status
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "duration_ms": round((span.end_time - span.start_time) / 1e6, 3) if span.end_time else None,
        "status": status.status_code.name,
        "status_description": status.description,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
    }


class JsonLinesSpanExporter:
    """An OpenTelemetry span exporter that appends each finished span to a file as one JSON object a line
    ([span_record][themisto_env.tracing.span_record]); several processes may append to one file.

    Args:
        path: The file (made with its folder; appended to).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    def export(self, spans: Sequence[Any]) -> Any:
        """Append the spans (one write per batch)."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        text = "".join(json.dumps(span_record(s), default=str) + "\n" for s in spans)
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  # closed by shutdown
            self._file.write(text)
            self._file.flush()
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Everything exported is written already."""
        return True

    def shutdown(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _exporters_asked() -> list[str]:
    """The exporters the `OTEL_*` variables ask for (`otlp`, `console`), none where they ask nothing."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = os.environ.get("OTEL_TRACES_EXPORTER")
    if names is None:
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        return ["otlp"] if endpoint else []
    return [n.strip().lower() for n in names.split(",") if n.strip() and n.strip().lower() != "none"]


def _otlp_exporter() -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip() == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs pip install opentelemetry-exporter-otlp-proto-grpc "
                "(the trace extra sends OTLP over HTTP: unset it or set http/protobuf)"
            ) from None
        return OTLPSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    except ImportError:
        raise ConfigError(f"OTEL_TRACES_EXPORTER=otlp needs OpenTelemetry's OTLP exporter: {INSTALL_HINT}") from None
    return HttpExporter()


def _provider_for(trace_file: Path | None, exporters: list[str]) -> Any:
    """A new sdk tracer provider exporting to `trace_file` and `exporters`."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        asked = "--trace" if trace_file is not None else "OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT"
        raise ConfigError(f"tracing ({asked}) needs OpenTelemetry's sdk: {INSTALL_HINT}") from None
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and OTEL_BSP_* apply as the sdk reads them
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    attributes = {} if named else {"service.name": "themisto-env"}
    provider = TracerProvider(resource=Resource.create({**attributes, "service.version": __version__}))
    for name in exporters:
        if name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            raise ConfigError(f"OTEL_TRACES_EXPORTER={name!r}: this tool exports otlp, console or none")
    if trace_file is not None:
        provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(trace_file)))
    return provider


@contextmanager
def configured(trace_file: str | Path | None = None) -> Iterator[bool]:
    """Trace a command's work, the standard way, then flush: spans go to `trace_file` as JSON lines (also
    from worker processes, told by [TRACE_FILE_VARIABLE][themisto_env.tracing.TRACE_FILE_VARIABLE]) and to
    the exporters the `OTEL_*` variables name (`OTEL_TRACES_EXPORTER=otlp`, or an
    `OTEL_EXPORTER_OTLP_ENDPOINT`: OTLP over HTTP to any collector). Nothing is set up (and the sdk not
    imported) when neither asks; a provider set already (by [set_provider][themisto_env.tracing.set_provider]
    or the application) is kept.

    Yields:
        Whether this call set tracing up.

    Raises:
        ConfigError: The sdk (or the exporter asked for) is not installed: one line with the install hint.
    """
    if trace_file is None and os.environ.get(TRACE_FILE_VARIABLE):
        trace_file = os.environ[TRACE_FILE_VARIABLE]
    path = Path(trace_file).absolute() if trace_file is not None else None
    exporters = _exporters_asked()
    if (path is None and not exporters) or enabled():
        yield False
        return
    with _lock:
        provider = _provider_for(path, exporters)
        set_provider(provider)
    told = os.environ.get(TRACE_FILE_VARIABLE)
    if path is not None:
        os.environ[TRACE_FILE_VARIABLE] = str(path)
    try:
        yield True
    finally:
        if path is not None:
            if told is None:
                os.environ.pop(TRACE_FILE_VARIABLE, None)
            else:
                os.environ[TRACE_FILE_VARIABLE] = told
        set_provider(None)
        provider.shutdown()  # flushes what is batched


__all__ = [
    "INSTALL_HINT",
    "NO_SPAN",
    "TRACER_NAME",
    "TRACE_FILE_VARIABLE",
    "Attributes",
    "JsonLinesSpanExporter",
    "SpanLike",
    "Stopwatch",
    "configured",
    "current",
    "enabled",
    "end",
    "fail",
    "record",
    "set_provider",
    "span",
    "span_record",
    "start",
    "timed",
    "within",
]
