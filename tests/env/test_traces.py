"""An episode's OpenTelemetry spans on a real local kernel (opentelemetry-sdk's in-memory exporter): the spans
in order under one episode span, their parent links, a fault on its span, and the episode's clock."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from themisto_env import tracing
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import ToolCall

ROUTES = {"forward", "restore", "fork", "fresh", "in place"}


@pytest.fixture
def env(env_dataset: dict[str, str]) -> Iterator[ThemistoEnv]:
    made = ThemistoEnv(**env_dataset, task="output", observation="tools")
    try:
        yield made
    finally:
        made.close()


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names, parent = [], _parent(span)
    while parent is not None:
        names.append(by_id[parent].name)
        parent = _parent(by_id[parent])
    return names


def test_an_episode_is_one_trace_of_its_turns_in_order(env: ThemistoEnv, spans: InMemorySpanExporter) -> None:
    last = len(env.episode.episode_samples[env.episode.episode_ids[0]]) - 2
    _, info = env.reset(options={"trajectory": env.episode.episode_ids[0], "sample": last})  # two samples left
    scored: list[dict[str, Any]] = []
    terminated = False
    while not terminated:
        env.step(ToolCall(tool="list_variables"))
        _, _, terminated, _, step_info = env.step(Prediction(text="42"))
        scored.append(step_info)
    finished = list(spans.get_finished_spans())
    by_id = {s.context.span_id: s for s in finished}
    episodes = [s for s in finished if s.name == "themisto.episode"]
    assert len(episodes) == 1, "the episode's span ended with its last sample"
    episode = episodes[0]
    assert episode.parent is None and episode.attributes["themisto.trajectory.id"] == info["trajectory_id"]
    assert {s.context.trace_id for s in finished} == {episode.context.trace_id}, "one trace per episode"

    turns = sorted((s for s in finished if _parent(s) == episode.context.span_id), key=lambda s: s.start_time)
    names = [s.name for s in turns if s.name != "themisto.state.serve"]
    assert names == ["themisto.reset", *["themisto.tool_call", "themisto.score"] * 2]
    for turn in turns:  # each turn inside its episode, each child inside its parent
        assert episode.start_time <= turn.start_time <= turn.end_time <= episode.end_time
    for span in finished:
        if span.parent is not None:
            parent = by_id[span.parent.span_id]
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time, span.name

    tools = [s for s in turns if s.name == "themisto.tool_call"]
    assert [s.attributes["themisto.tool.name"] for s in tools] == ["list_variables"] * 2
    assert all(s.attributes["themisto.tool.ok"] and s.status.status_code != StatusCode.ERROR for s in tools)
    calls = [s for s in finished if s.name == "themisto.kernel.call"]
    assert calls and all("themisto.tool_call" in _ancestors(s, by_id) for s in calls), "helper calls under tools"
    served = [s for s in finished if s.name == "themisto.state.serve"]
    assert len(served) == 2, "each sample's state served once (lazily, for its tool call or as it began)"
    assert all(s.attributes["themisto.state.route"] in ROUTES for s in served)
    assert all(s.attributes["themisto.state.check"] == "verified" for s in served)
    restores = [s for s in finished if s.name == "themisto.state.restore"]
    for restore in restores:
        assert "themisto.state.serve" in _ancestors(restore, by_id)
        assert (
            len(restore.attributes["themisto.snapshot.digest"]) == 64
            and restore.attributes["themisto.snapshot.bytes"] > 0
        )
    executes = [s for s in finished if s.name == "themisto.kernel.execute"]
    assert all("themisto.state.serve" in _ancestors(s, by_id) for s in executes), "cells run to reach a state"
    scores = [s for s in turns if s.name == "themisto.score"]
    for span, step_info in zip(scores, scored, strict=True):
        assert span.attributes["themisto.score.rouge_l"] == pytest.approx(step_info["scores"]["rouge_l"])
        assert span.attributes["themisto.score.reward"] == pytest.approx(step_info["reward"])


def test_the_clock_says_where_a_samples_time_went(env: ThemistoEnv) -> None:
    env.reset(options={"sample": 3})
    env.step(ToolCall(tool="list_variables"))
    env.step(ToolCall(tool="inspect_variable", args={"name": "sales"}))
    env.step(Prediction(text="x"))
    seconds = env.episode.scored_seconds
    assert set(seconds) <= {"state", "tools", "scoring"} and seconds["state"] > 0 and seconds["tools"] > 0
    assert seconds["scoring"] > 0
    assert sum(seconds.values()) <= sum(env.episode.clock.totals.values()) + 1e-9


def test_tracing_off_records_nothing_and_changes_nothing(env: ThemistoEnv) -> None:
    assert not tracing.enabled() and tracing.span("x") is tracing.NO_SPAN
    _, info = env.reset(options={"sample": 3})
    _, _, _, _, step_info = env.step(Prediction(text="x"))
    assert "scores" in step_info and env.episode.scored_seconds, "the clock runs without a tracer"


@pytest.mark.slow
def test_a_killed_kernel_shows_on_its_tool_call_as_an_error(env: ThemistoEnv, spans: InMemorySpanExporter) -> None:
    env.reset(options={"sample": 3})
    kernel = env.episode.tool_context().kernel
    os.kill(kernel.launcher.pid(), signal.SIGKILL)
    _, _, _, _, info = env.step(ToolCall(tool="list_variables"))
    assert "recovered" in info["infrastructure_error"]
    finished = list(spans.get_finished_spans())
    tool = next(s for s in finished if s.name == "themisto.tool_call")
    assert tool.status.status_code == StatusCode.ERROR and "KernelDiedError" in (tool.status.description or "")
    events = [e for e in tool.events if e.name == "exception"]
    assert events and events[0].attributes["exception.type"].endswith("KernelDiedError")
    died = [s for s in finished if s.name == "themisto.kernel.call" and s.status.status_code == StatusCode.ERROR]
    assert died and _parent(died[0]) is not None, "the helper call that met the dead kernel is an error too"
    recovered = [s for s in finished if s.name == "themisto.state.serve" and _parent(s) == tool.context.span_id]
    assert recovered and recovered[0].attributes["themisto.state.check"] == "verified", "served again, under the call"
