"""Exporting traces: the JSON-lines file of `themisto run --trace FILE`, the exporters the `OTEL_*` variables
name, and [configured][themisto_env.trace_export.configured], which sets them up for a command and flushes.

The spans themselves are made by [themisto_env.tracing][themisto_env.tracing]; this module needs
OpenTelemetry's sdk (the `trace` extra), imported only when a command asks for traces.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from themisto_env._version import __version__
from themisto_env.errors import ConfigError
from themisto_env.tracing import enabled, set_provider

__all__ = ["INSTALL_HINT", "TRACE_FILE_VARIABLE", "JsonLinesSpanExporter", "configured", "span_record"]

INSTALL_HINT = "pip install 'themisto-env[trace]'"
TRACE_FILE_VARIABLE = "THEMISTO_TRACE_FILE"
"""Where [configured][themisto_env.trace_export.configured] tells worker processes to write spans (JSON lines)."""
_LOCK = threading.Lock()  # one set-up at a time


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
    ([span_record][themisto_env.trace_export.span_record]); several processes may append to one file.

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
    from worker processes, told by [TRACE_FILE_VARIABLE][themisto_env.trace_export.TRACE_FILE_VARIABLE]) and to
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
    with _LOCK:
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
