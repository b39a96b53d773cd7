"""Provider errors: the real langchain-openai client against a stand-in OpenAI-compatible server.

The server (``http.server`` in a thread on 127.0.0.1) answers ``POST /v1/chat/completions`` with scripted
behaviours, one per request in order (then a default): a chat completion (optionally late), an HTTP
error with headers (429 with ``Retry-After``, 500, 400), a reply that is not JSON, or a hang longer than
the client's timeout. The agents' retries, the runner's ``model_error`` rows, resume, ``--fail-on-error``
and the CLI's one-line, verbatim error messages are checked through it.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.messages import HumanMessage

from tests.agents.conftest import MakeEnv
from tests.agents.stand_in import Behaviour, StandIn, error, ok
from themisto_env.agents.llm import StaticContextAgent
from themisto_env.agents.providers import PROVIDERS, Provider
from themisto_env.cli import main
from themisto_env.env.actions import Prediction
from themisto_env.errors import ModelError
from themisto_env.run import results, tally
from themisto_env.run.config import RunConfig
from themisto_env.run.results import read_results
from themisto_env.run.runner import run

pytest.importorskip("langchain_openai")


@pytest.fixture(scope="module")
def server() -> Iterator[StandIn]:
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


@pytest.fixture
def fresh(server: StandIn) -> StandIn:
    server.play(default=ok())
    return server


def options(server: StandIn, **extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "stand-in", "base_url": server.base_url, "api_key": "test", **extra}


def make(server: StandIn, waits: list[float] | None = None, **extra: Any) -> StaticContextAgent:
    agent = StaticContextAgent(**options(server, **{"timeout": 5.0, "retry_delay": 0.01, **extra}))
    if waits is not None:
        agent.retry.sleep = waits.append
    return agent


@pytest.fixture(scope="module")
def static_env(make_env: MakeEnv) -> Any:
    return make_env("output", "static")


def first(env: Any, agent: StaticContextAgent) -> tuple[Any, dict[str, Any]]:
    obs, info = env.reset(options={"trajectory": 0})
    agent.reset(info)
    return obs, info


# -- the agent's retries ------------------------------------------------------------------------------


def test_the_client_s_own_retries_are_off_so_ours_is_the_one_policy(fresh: StandIn) -> None:
    agent = make(fresh, max_retries=0)
    assert type(agent.chat_model).__name__ == "ChatOpenAI"
    assert agent.chat_model.max_retries == 0
    fresh.play(error(500))
    with pytest.raises(ModelError):
        agent.call_model(agent.chat_model, [HumanMessage("hello")])
    assert len(fresh.requests) == 1  # no hidden retries in the client


def test_rate_limits_and_5xx_are_retried_with_backoff_honouring_retry_after(fresh: StandIn, static_env: Any) -> None:
    waits: list[float] = []
    agent = make(fresh, waits, retry_delay=0.5)
    obs, info = first(static_env, agent)
    fresh.play(error(429, "slow down", retry_after="7"), error(500), error(503), ok(delay=0.2))
    action = agent.act(obs, info)
    assert isinstance(action, Prediction) and action.text == "df.shape"
    assert len(fresh.requests) == 4
    assert waits[0] == 7.0  # Retry-After honoured
    assert 0 <= waits[1] <= 1.0 and 0 <= waits[2] <= 2.0  # full jitter under base * 2**(retry - 1)
    assert agent.usage.model_calls == 1 and agent.usage.input_tokens == 11 and agent.usage.output_tokens == 7


def test_retry_after_is_waited_for_really(fresh: StandIn, static_env: Any) -> None:
    agent = make(fresh)
    obs, info = first(static_env, agent)
    fresh.play(error(429, "slow down", retry_after="1"), ok())
    started = time.monotonic()
    agent.act(obs, info)
    assert time.monotonic() - started >= 1.0
    assert len(fresh.requests) == 2


def test_a_hang_past_the_client_timeout_is_retried(fresh: StandIn, static_env: Any) -> None:
    waits: list[float] = []
    agent = make(fresh, waits, timeout=0.5)
    obs, info = first(static_env, agent)
    fresh.play(ok(delay=2.0), ok())
    action = agent.act(obs, info)
    assert isinstance(action, Prediction) and action.text == "df.shape"
    assert len(fresh.requests) == 2 and len(waits) == 1


def test_retries_run_out_in_one_line(fresh: StandIn, static_env: Any) -> None:
    waits: list[float] = []
    agent = make(fresh, waits, max_retries=2)
    obs, info = first(static_env, agent)
    fresh.play(default=error(502, "bad gateway"))
    with pytest.raises(ModelError) as caught:
        agent.act(obs, info)
    assert len(fresh.requests) == 3 and len(waits) == 2
    message = str(caught.value)
    assert "\n" not in message and "HTTP 502" in message and "after 3 attempts" in message
    assert "bad gateway" in message and caught.value.status == 502 and caught.value.attempts == 3


@pytest.mark.parametrize(
    "behaviour, expected",
    [
        (error(400, "Invalid [messages]: too long"), "HTTP 400"),
        (error(401, "Incorrect API key"), "HTTP 401"),
        (Behaviour(body="{not json"), "malformed reply, HTTP 200, not retried"),
        (Behaviour(body="{}"), "not retried"),
    ],
    ids=["400", "401", "malformed-json", "no-choices"],
)
def test_what_retrying_cannot_mend_is_not_retried(
    fresh: StandIn, static_env: Any, behaviour: Behaviour, expected: str
) -> None:
    waits: list[float] = []
    agent = make(fresh, waits)
    obs, info = first(static_env, agent)
    fresh.play(behaviour)
    with pytest.raises(ModelError) as caught:
        agent.act(obs, info)
    assert len(fresh.requests) == 1 and waits == []
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_the_async_path_retries_too(fresh: StandIn, static_env: Any) -> None:
    waits: list[float] = []
    agent = make(fresh)

    async def asleep(seconds: float) -> None:
        waits.append(seconds)

    agent.retry.asleep = asleep
    obs, info = first(static_env, agent)
    fresh.play(error(429, "slow down", retry_after="3"), error(500), ok())
    action = asyncio.run(agent.aact(obs, info))
    assert isinstance(action, Prediction) and action.text == "df.shape"
    assert len(fresh.requests) == 3 and waits[0] == 3.0


# -- the runner ---------------------------------------------------------------------------------------


def config(server: StandIn, env_dataset: dict[str, str], **kw: Any) -> RunConfig:
    return RunConfig(
        agent="llm-static",
        agent_options=options(server, timeout=5.0, retry_delay=0.01),
        task="output",
        data=env_dataset["dataset"],
        env={"snapshot_dir": env_dataset["snapshot_dir"]},
        **kw,
    )


def test_a_sample_whose_calls_fail_is_a_model_error_row_retried_on_resume(
    fresh: StandIn, env_dataset: dict[str, str], tmp_path: Path
) -> None:
    cfg = config(fresh, env_dataset, limit=3, max_retries=1)
    fresh.play(ok(), error(500, "overloaded"), error(500, "overloaded"), default=ok())
    summary = run(cfg, tmp_path, progress=False)
    rows = read_results(tmp_path)
    assert len(rows) == 3 and len(fresh.requests) == 4  # 1 + (1 + 1 retry) + 1
    failed = [r for r in rows if r.model_error]
    assert len(failed) == 1 and failed[0] is rows[1]
    assert "HTTP 500" in failed[0].model_error and "after 2 attempts" in failed[0].model_error
    assert not failed[0].infrastructure_error
    assert summary["model_errors"] == 1 and summary["samples"] == 2 and summary["infrastructure_failures"] == 0

    fresh.play(default=ok())
    summary = run(cfg, tmp_path, progress=False)  # resume: only the failed sample again
    assert len(fresh.requests) == 1
    assert summary["model_errors"] == 0 and summary["samples"] == 3
    last = read_results(tmp_path)[-1]
    assert last.sample_id == failed[0].sample_id and last.model_error is None


def test_fail_on_error_stops_the_run(
    fresh: StandIn, env_dataset: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tally, "FAIL_ON_ERROR_MIN_SAMPLES", 2)
    fresh.play(default=error(500, "down"))
    with pytest.raises(ModelError, match=r"stopped: 2 of 2 samples failed .*--fail-on-error 0.5"):
        run(config(fresh, env_dataset, limit=4, max_retries=0, fail_on_error=0.5), tmp_path, progress=False)
    assert len(read_results(tmp_path)) == 2  # the rows so far are kept
    assert json.loads((tmp_path / results.SUMMARY).read_text())["model_errors"] == 2


# -- the command line: one line, verbatim -------------------------------------------------------------


PROGRESS_LINE = re.compile(r"^.*: \d+/\d+ \(\d+%\), \d+:\d\d elapsed")
"""A progress line (stderr is no terminal here: the bar is a line now and then, themisto_env.progress)."""


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run ``themisto ARGS``: the exit code and stderr, without its progress lines."""
    monkeypatch.setattr(sys, "argv", ["themisto", *args])
    with pytest.raises(SystemExit) as caught:
        main()
    err = capsys.readouterr().err
    return int(caught.value.code or 0), "".join(
        line for line in err.splitlines(keepends=True) if not PROGRESS_LINE.match(line)
    )


def test_cli_fail_on_error_is_one_verbatim_line(
    fresh: StandIn,
    env_dataset: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(tally, "FAIL_ON_ERROR_MIN_SAMPLES", 2)
    cfg = config(fresh, env_dataset).model_dump(exclude_defaults=True)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    fresh.play(default=error(400, "Invalid [messages]: see pip install 'themisto-env[openai]'"))
    args = ["run", "-c", str(tmp_path / "run.yaml"), "--limit", "3", "--fail-on-error", "0.5", "--max-retries", "0"]
    code, err = cli(monkeypatch, capsys, *args, "--out", str(tmp_path / "out"))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: stopped: 2 of 2 samples failed")
    assert "Invalid [messages]: see pip install 'themisto-env[openai]'" in lines[0]  # brackets kept
    assert len(fresh.requests) == 2  # 400 is not retried


def test_cli_install_hints_print_verbatim(
    env_dataset: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(PROVIDERS, "openai", Provider("no_such_langchain_openai", "ChatOpenAI", extra="openai"))
    cfg = {"agent": "llm-static", "agent_options": {"provider": "openai", "model": "m"}, "data": env_dataset["dataset"]}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    code, err = cli(monkeypatch, capsys, "run", "-c", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out"))
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "pip install 'themisto-env[openai]'" in err


def test_cli_config_errors_keep_their_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.yaml").write_text("agent: [llm-static\nlimit: [b]\n")
    code, err = cli(monkeypatch, capsys, "run", "-c", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "out"))
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "[llm-static" in err


def test_a_hung_server_is_a_timeout_by_default_not_a_run_that_waits_forever() -> None:
    from themisto_env.agents.llm import DEFAULT_TIMEOUT_S

    agent = StaticContextAgent(provider="openai", model="m", api_key="test", base_url="http://127.0.0.1:9/v1")
    assert agent.chat_model.request_timeout == DEFAULT_TIMEOUT_S
    assert agent.chat_model.max_retries == 0, "one retry policy: ours"
    given = StaticContextAgent(provider="openai", model="m", api_key="test", timeout=3.0)
    assert given.chat_model.request_timeout == 3.0


def test_a_local_server_needs_no_key(fresh: StandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM and its kind: the openai provider with a base URL and no key sends ``EMPTY``; without a base
    URL a missing key is still one line, which says a local server needs none."""
    from themisto_env.agents.providers import LOCAL_SERVER_KEY
    from themisto_env.errors import ProviderError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = StaticContextAgent(provider="openai", model="stand-in", base_url=fresh.base_url, max_retries=0)
    reply = agent.call_model(agent.chat_model, [HumanMessage("hello")])
    assert "df.shape" in str(reply.content)
    assert fresh.headers[-1]["authorization"] == f"Bearer {LOCAL_SERVER_KEY}"
    with pytest.raises(ProviderError, match=r"needs an API key: set OPENAI_API_KEY .*a local server \(--base-url\)"):
        StaticContextAgent(provider="openai", model="gpt-4o-mini")
