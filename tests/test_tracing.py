"""themisto_env.tracing: spans only while a provider is set, the stopwatch's own-time accounting, the JSON-lines
exporter, and the standard configuration (``OTEL_*``, a trace file; one line without the sdk)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from themisto_env import trace_export, tracing
from themisto_env.errors import ConfigError, InfrastructureError, KernelDiedError


def test_off_every_hook_is_the_one_no_op() -> None:
    assert not tracing.enabled()
    assert tracing.span("a", {"k": 1}) is tracing.NO_SPAN and tracing.start("b") is tracing.NO_SPAN
    assert tracing.current() is tracing.NO_SPAN and tracing.timed("state") is tracing.NO_SPAN
    with tracing.span("a") as span:
        tracing.record(span, {"k": 1})
        tracing.fail(span, "broken")
    tracing.end(tracing.NO_SPAN, {"k": 1})


def test_spans_nest_and_record_errors(spans: InMemorySpanExporter) -> None:
    with tracing.span("outer", {"a": 1, "gone": None}) as outer:
        with pytest.raises(KernelDiedError), tracing.span("died"):
            raise KernelDiedError("the local kernel died")
        with pytest.raises(KeyError), tracing.span("refused", errors=InfrastructureError):
            raise KeyError("x")
        tracing.record(outer, {"b": "two", "none": None})
    died, refused, outer_span = spans.get_finished_spans()
    assert [died.name, refused.name, outer_span.name] == ["died", "refused", "outer"]
    assert died.parent.span_id == outer_span.context.span_id == refused.parent.span_id
    assert died.status.status_code.name == "ERROR" and "KernelDiedError" in died.status.description
    assert refused.status.status_code.name == "UNSET", "an exception not of `errors` is recorded, not an error"
    assert [e.name for e in refused.events] == ["exception"]
    assert dict(outer_span.attributes) == {"a": 1, "b": "two"}


def test_untraced_work_makes_no_span_and_tracing_resumes_after(spans: InMemorySpanExporter) -> None:
    """Work done ahead for no episode (a spare kernel forked in the background) is not a trace of its own."""
    with tracing.untraced(), tracing.span("spare start"):
        pass
    with tracing.span("after"):
        pass
    assert [s.name for s in spans.get_finished_spans()] == ["after"]


def test_a_started_span_is_the_parent_within(spans: InMemorySpanExporter) -> None:
    episode = tracing.start("episode")
    with tracing.within(episode), tracing.span("turn"):
        pass
    with tracing.span("elsewhere"):
        pass
    tracing.end(episode, {"done": True})
    turn, elsewhere, ended = spans.get_finished_spans()
    assert turn.parent.span_id == ended.context.span_id and elsewhere.parent is None
    assert ended.attributes["done"] is True


def test_the_stopwatch_counts_each_kinds_own_time() -> None:
    ticks = [0.0]  # a clock the test moves
    clock = tracing.Stopwatch(clock=lambda: ticks[0])
    mark = clock.mark()
    with tracing.within(tracing.NO_SPAN, clock):
        with tracing.span("tool", timed="tools"):
            ticks[0] += 1.0
            with tracing.span("serve", timed="state"):
                ticks[0] += 4.0
                with tracing.timed("state"):  # the same kind inside: counted once
                    ticks[0] += 2.0
            ticks[0] += 0.5
        with tracing.timed("model"):
            ticks[0] += 3.0
    assert clock.since(mark) == {"tools": 1.5, "state": 6.0, "model": 3.0}
    with tracing.span("untimed", timed="tools"):  # no stopwatch current: nothing counted
        ticks[0] += 10.0
    assert clock.totals == {"tools": 1.5, "state": 6.0, "model": 3.0}


def test_the_json_lines_exporter_writes_a_record_per_span(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(trace_export.JsonLinesSpanExporter(out)))
    tracing.set_provider(provider)
    try:
        with tracing.span("outer", {"themisto.step": 3}), pytest.raises(KernelDiedError), tracing.span("inner"):
            raise KernelDiedError("gone")
    finally:
        tracing.set_provider(None)
        provider.shutdown()
    inner, outer = (json.loads(line) for line in out.read_text().splitlines())
    assert inner["parent_id"] == outer["span_id"] and outer["parent_id"] is None
    assert inner["trace_id"] == outer["trace_id"] and len(inner["trace_id"]) == 32 and len(inner["span_id"]) == 16
    assert inner["status"] == "ERROR" and inner["events"][0]["attributes"]["exception.type"].endswith("KernelDiedError")
    assert outer["attributes"] == {"themisto.step": 3} and outer["status"] == "UNSET"
    assert outer["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= outer["end_ns"]


def test_configured_sets_up_only_what_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(trace_export.TRACE_FILE_VARIABLE, raising=False)
    with trace_export.configured() as on:
        assert not on and not tracing.enabled()
    out = tmp_path / "trace.jsonl"
    with trace_export.configured(out) as on:
        assert on and tracing.enabled()
        assert trace_export.TRACE_FILE_VARIABLE in os.environ, "worker processes are told the file"
        with tracing.span("themisto.episode"):
            pass
    assert not tracing.enabled() and trace_export.TRACE_FILE_VARIABLE not in os.environ
    assert [json.loads(line)["name"] for line in out.read_text().splitlines()] == ["themisto.episode"]
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ConfigError, match="zipkin"), trace_export.configured():
        pass
    assert not tracing.enabled()


def test_without_the_sdk_one_line_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(ConfigError) as caught, trace_export.configured(tmp_path / "trace.jsonl"):
        pass
    assert str(caught.value) == f"tracing (--trace) needs OpenTelemetry's sdk: {trace_export.INSTALL_HINT}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    with (
        pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_ENDPOINT.*themisto-env\[trace\]"),
        trace_export.configured(),
    ):
        pass


def test_a_provider_the_application_sets_globally_is_used() -> None:
    code = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "from themisto_env import tracing\n"
        "assert not tracing.enabled()\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "trace.set_tracer_provider(provider)\n"
        "with trace.get_tracer('app').start_as_current_span('rollout'), tracing.span('themisto.episode'):\n"
        "    pass\n"
        "episode, rollout = exporter.get_finished_spans()\n"
        "assert episode.parent.span_id == rollout.context.span_id\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr
