"""The response cache: the real langchain-openai client against the stand-in server of test_provider_errors.

Every test counts the HTTP requests the server received: a hit must make none. The stand-in answers each
request with a different text (or tool call) where it matters, so a reply that was not replayed from the
cache would show in the predictions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from tests.agents.conftest import MakeEnv
from tests.agents.episodes import run_agent
from tests.agents.stand_in import Behaviour, StandIn, ok
from tests.agents.test_provider_errors import cli
from themisto_env.agents import make_agent
from themisto_env.agents.cache import ResponseCache, is_cached, request_key, request_material
from themisto_env.agents.fake_chat import ScriptedChatModel
from themisto_env.agents.llm import StaticContextAgent
from themisto_env.agents.llm_tools import ToolUsingAgent
from themisto_env.env.actions import Prediction
from themisto_env.env.tools import ToolCall
from themisto_env.errors import DataError

pytest.importorskip("langchain_openai")

SECRET = "sk-themisto-secret-4242"


def tool_completion(name: str, args: dict[str, Any]) -> Behaviour:
    """A chat completion calling one tool, with a fresh random call id (as real providers give)."""
    call = {
        "id": f"call_{uuid.uuid4().hex}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    body = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": 0,
        "model": "stand-in",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }
    return Behaviour(body=json.dumps(body))


def numbered(n: int, start: int = 0) -> list[Behaviour]:
    """``n`` completions, each with a different answer (``x0``, ``x1``, ...)."""
    return [ok(f"```python\nx{i}\n```") for i in range(start, start + n)]


@pytest.fixture(scope="module")
def server() -> Iterator[StandIn]:
    stand_in = StandIn()
    yield stand_in
    stand_in.close()


@pytest.fixture
def fresh(server: StandIn) -> StandIn:
    server.play(default=ok())
    return server


def options(server: StandIn, cache: Path | None, **extra: Any) -> dict[str, Any]:
    base = {"provider": "openai", "model": "stand-in", "base_url": server.base_url, "api_key": SECRET}
    return {**base, "timeout": 5.0, "retry_delay": 0.01, "cache": cache, **extra}


@pytest.fixture(scope="module")
def static_env(make_env: MakeEnv) -> Any:
    return make_env("output", "static")


def ask(agent: StaticContextAgent, text: str = "hello") -> Any:
    """One model call through the agent (its cache included), recorded in its usage."""
    reply = agent.call_model(agent.chat_model, [SystemMessage("system"), HumanMessage(text)])
    agent.record(reply)
    return reply


# -- a rerun is free and the same ---------------------------------------------------------------------


def test_a_rerun_makes_no_request_and_predicts_the_same(fresh: StandIn, static_env: Any, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    fresh.play(*numbered(50))
    first = run_agent(static_env, make_agent("llm-static", **options(fresh, cache)))
    assert len(fresh.requests) == len(first) > 1
    assert len({r.prediction for r in first}) == len(first)  # each answer differs: a miss would show
    assert all(r.usage.model_calls == 1 and r.usage.cached_calls == 0 for r in first)

    fresh.play(*numbered(50, start=100))  # a new agent, a new connection: as a rerun in a new process
    second = run_agent(static_env, make_agent("llm-static", **options(fresh, cache)))
    assert fresh.requests == []
    assert [r.prediction for r in second] == [r.prediction for r in first]
    assert [r.scores for r in second] == [r.scores for r in first]
    for usage in (r.usage for r in second):  # no call, no token spent; what the original calls used
        assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (0, 0, 0)
        assert (usage.cached_calls, usage.cached_input_tokens, usage.cached_output_tokens) == (1, 11, 7)
        assert usage.tokens_reported


def test_the_async_path_reads_and_writes_the_cache(fresh: StandIn, static_env: Any, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    fresh.play(*numbered(50))
    first = run_agent(static_env, StaticContextAgent(**options(fresh, cache)), use_async=True)
    assert len(fresh.requests) == len(first)
    fresh.play(*numbered(50, start=100))
    second = run_agent(static_env, StaticContextAgent(**options(fresh, cache)), use_async=True)
    assert fresh.requests == [] and [r.prediction for r in second] == [r.prediction for r in first]
    fresh.play(*numbered(50, start=200))  # and the sync path reads what the async one wrote
    third = run_agent(static_env, StaticContextAgent(**options(fresh, cache)))
    assert fresh.requests == [] and [r.prediction for r in third] == [r.prediction for r in first]


def test_without_a_cache_every_call_is_made(fresh: StandIn, static_env: Any) -> None:
    agent = StaticContextAgent(**options(fresh, None))
    assert agent.cache is None
    fresh.play(*numbered(4))
    for _ in range(2):
        assert not is_cached(ask(agent))
    assert len(fresh.requests) == 2 and agent.usage.model_calls == 2 and agent.usage.cached_calls == 0


# -- what is in the key, and what is not --------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.7},
        {"model": "stand-in-2"},
        {"max_tokens": 50},
        {"seed": 3},
        {"top_p": 0.5},
        {"stop": ["```"]},
        {"extra_body": {"top_k": 5}},
    ],
    ids=["temperature", "model", "max-tokens", "seed", "top-p", "stop", "extra-body"],
)
def test_a_parameter_that_changes_the_answer_misses(fresh: StandIn, tmp_path: Path, change: dict[str, Any]) -> None:
    cache = tmp_path / "replies.sqlite"
    fresh.play(*numbered(3))
    assert ask(StaticContextAgent(**options(fresh, cache, temperature=0.0))).content == "```python\nx0\n```"
    assert ask(StaticContextAgent(**options(fresh, cache, **{"temperature": 0.0, **change}))).content.endswith(
        "x1\n```"
    )
    assert len(fresh.requests) == 2


def test_other_messages_miss(fresh: StandIn, tmp_path: Path) -> None:
    agent = StaticContextAgent(**options(fresh, tmp_path / "replies.sqlite"))
    fresh.play(*numbered(3))
    ask(agent, "hello")
    ask(agent, "hello!")
    assert not is_cached(ask(agent, "hello "))  # one space is another prompt
    assert is_cached(ask(agent, "hello"))
    assert len(fresh.requests) == 3


def test_keys_endpoints_timeouts_and_retries_do_not_change_the_answer(fresh: StandIn, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    fresh.play(*numbered(2))
    original = ask(StaticContextAgent(**options(fresh, cache)))
    other = options(fresh, cache, api_key="sk-another", timeout=9.0, max_retries=1, retry_delay=2.0)
    other["base_url"] = fresh.base_url.replace("127.0.0.1", "localhost")
    replayed = ask(StaticContextAgent(**other))
    assert len(fresh.requests) == 1
    assert is_cached(replayed) and replayed.content == original.content


def test_each_draw_of_pass_at_k_is_its_own_entry(fresh: StandIn, static_env: Any, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"

    def play(draws: int) -> list[str]:
        agent = StaticContextAgent(**options(fresh, cache))
        obs, info = static_env.reset(options={"trajectory": 0})
        agent.reset(info)
        texts = []
        for draw in range(draws):
            action = agent.act(obs, {**info, "draw": draw})
            assert isinstance(action, Prediction)
            texts.append(action.text)
        return texts

    fresh.play(*numbered(3))
    first = play(3)
    assert first == ["x0", "x1", "x2"] and len(fresh.requests) == 3  # not draw 0's answer three times
    fresh.play(*numbered(3, start=10))
    assert play(3) == first and fresh.requests == []


def test_tool_call_ids_are_renumbered_in_the_key() -> None:
    model = ScriptedChatModel()

    def conversation(call_id: str) -> list[Any]:
        return [
            SystemMessage("s"),
            HumanMessage("h"),
            AIMessage("", tool_calls=[{"name": "list_variables", "args": {}, "id": call_id}]),
            ToolMessage("df: DataFrame", tool_call_id=call_id),
        ]

    assert request_key(model, conversation("call_abc")) == request_key(model, conversation("call_xyz"))
    material = request_material(model, conversation("call_abc"))
    assert material["messages"][2]["tool_calls"][0]["id"] == material["messages"][3]["tool_call_id"] == "id0"
    changed = conversation("call_abc")
    changed[3] = ToolMessage("df: Series", tool_call_id="call_abc")
    assert request_key(model, changed) != request_key(model, conversation("call_abc"))
    assert request_key(model, conversation("a"), draw=1) != request_key(model, conversation("a"))


# -- llm-tools: tool calls replayed -------------------------------------------------------------------


def _first_sample(env: Any, agent: Any) -> list[Any]:
    obs, info = env.reset(options={"trajectory": 0})
    agent.reset(info)
    actions = []
    while True:
        action = agent.act(obs, info)
        actions.append(action)
        obs, _, _, _, info = env.step(action)
        if isinstance(action, Prediction) or "scores" in info:
            return actions


def test_llm_tools_replays_its_tool_calls_from_the_cache(fresh: StandIn, make_env: MakeEnv, tmp_path: Path) -> None:
    env = make_env("output", "tools")
    cache = tmp_path / "replies.sqlite"
    fresh.play(
        tool_completion("list_variables", {}),
        tool_completion("inspect_variable", {"name": "df"}),
        ok("```\n(40, 3)\n```"),
    )
    agent = ToolUsingAgent(**options(fresh, cache))
    first = _first_sample(env, agent)
    assert first == [
        ToolCall(tool="list_variables", args={}),
        ToolCall(tool="inspect_variable", args={"name": "df"}),
        Prediction(text="(40, 3)"),
    ]
    assert len(fresh.requests) == 3 and "tools" in fresh.requests[0]  # the tools' schemas were sent
    assert len(ResponseCache(cache)) == 3

    fresh.play(default=ok("```\nwrong\n```"))
    agent = ToolUsingAgent(**options(fresh, cache))
    assert _first_sample(env, agent) == first
    assert fresh.requests == []
    assert (agent.usage.model_calls, agent.usage.cached_calls, agent.usage.tool_calls) == (0, 3, 2)
    assert (agent.usage.cached_input_tokens, agent.usage.cached_output_tokens) == (20 + 20 + 11, 5 + 5 + 7)


def test_a_fresh_reply_with_new_tool_call_ids_still_hits_the_rest(
    fresh: StandIn, make_env: MakeEnv, tmp_path: Path
) -> None:
    env = make_env("output", "tools")
    cache = tmp_path / "replies.sqlite"
    fresh.play(tool_completion("list_variables", {}), ok("```\n(40, 3)\n```"))
    first = _first_sample(env, ToolUsingAgent(**options(fresh, cache)))
    with sqlite3.connect(cache) as db:  # forget the first reply only
        db.execute("DELETE FROM replies WHERE created = (SELECT min(created) FROM replies)")
    db.close()
    fresh.play(tool_completion("list_variables", {}), default=ok("```\nwrong\n```"))  # another random call id
    agent = ToolUsingAgent(**options(fresh, cache))
    assert _first_sample(env, agent) == first
    assert len(fresh.requests) == 1  # the answer after the tool result hit, whatever the call's id
    assert (agent.usage.model_calls, agent.usage.cached_calls) == (1, 1)


# -- the file -----------------------------------------------------------------------------------------


def test_no_secret_reaches_the_file(fresh: StandIn, tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    agent = StaticContextAgent(**options(fresh, cache))
    fresh.play(*numbered(1))
    ask(agent)
    assert agent.cache is not None and len(agent.cache) == 1
    files = [p for p in tmp_path.iterdir() if p.name.startswith("replies.sqlite")]  # the db, its -wal, -shm
    assert files and not any(SECRET.encode() in p.read_bytes() for p in files)
    agent.cache.close()  # and after the WAL is checkpointed into the file
    assert SECRET.encode() not in cache.read_bytes()
    assert b"x0" in cache.read_bytes()  # (the reply itself is there)


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from langchain_core.messages import AIMessage
    from themisto_env.agents.cache import ResponseCache

    cache = ResponseCache(sys.argv[1])
    name, count = sys.argv[2], int(sys.argv[3])
    sys.stdin.readline()  # start together
    halfway = Path(sys.argv[1]).with_name(f"halfway-{name}")
    for i in range(count if count > 0 else 10**9):
        if count > 0 and i == count // 2:  # wait until every writer is halfway: their writes overlap
            halfway.touch()
            while len(list(halfway.parent.glob("halfway-*"))) < (int(sys.argv[4]) if len(sys.argv) > 4 else 1):
                time.sleep(0.01)
        key = f"shared-{i}" if i % 3 == 0 else f"{name}-{i}"
        text = f"{name} {i} " + "x" * 2000
        cache.put(key, AIMessage(text, usage_metadata={"input_tokens": i, "output_tokens": 1, "total_tokens": i + 1}))
        if i == 20:
            print("ready", flush=True)
    """
)


def _writer(cache: Path, name: str, count: int, writers: int = 1) -> subprocess.Popen[str]:
    """A process putting ``count`` replies (0: until killed); ``writers`` of them meet halfway."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(cache), name, str(count), str(writers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _go(*writers: subprocess.Popen[str]) -> None:
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()


def _intact(cache: Path) -> None:
    with sqlite3.connect(cache) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def test_two_writer_processes_leave_a_readable_file(tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    writers = [_writer(cache, name, 900, writers=2) for name in ("a", "b")]
    _go(*writers)
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    _intact(cache)
    replies = ResponseCache(cache)
    assert len(replies) == 300 + 2 * 600  # the shared keys once each, the first stored answer kept
    shared = replies.get("shared-3")
    assert shared is not None and str(shared.content).split()[:2] in (["a", "3"], ["b", "3"])
    own = replies.get("b-899")
    assert own is not None and own.usage_metadata is not None and own.usage_metadata["input_tokens"] == 899
    with sqlite3.connect(cache) as db:  # the two really wrote at the same time
        order = [k[0] for (k,) in db.execute("SELECT key FROM replies WHERE key NOT LIKE 'shared%' ORDER BY rowid")]
    db.close()
    assert sum(a != b for a, b in itertools.pairwise(order)) > 1


@pytest.mark.slow
def test_processes_opening_a_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """SQLite answers "locked" at once (no busy wait) while one process turns a new file to WAL: the others wait
    for it instead of calling the file unreadable (it happened to one of two agents in CI, about 1 open in 200)."""
    opener = (
        "import sys; from themisto_env.agents.cache import ResponseCache; sys.stdin.readline(); "
        "ResponseCache(sys.argv[1])"
    )
    for round_ in range(8):
        cache = tmp_path / f"replies-{round_}.sqlite"
        openers = [
            subprocess.Popen([sys.executable, "-c", opener, str(cache)], stdin=subprocess.PIPE, text=True)
            for _ in range(6)
        ]
        _go(*openers)
        assert [o.wait(timeout=120) for o in openers] == [0] * 6
        _intact(cache)


def test_a_writer_killed_mid_run_leaves_a_readable_file(tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    writer = _writer(cache, "w", 0)  # writes until killed
    _go(writer)
    assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    writer.send_signal(signal.SIGKILL)
    assert writer.wait(timeout=30) == -signal.SIGKILL
    _intact(cache)
    replies = ResponseCache(cache)
    stored = len(replies)
    assert stored > 20 and replies.get("w-1") is not None
    replies.put("after", AIMessage("still writable"))
    assert len(replies) == stored + 1


AGENT = textwrap.dedent(
    """
    import json, sys
    from langchain_core.messages import HumanMessage
    from themisto_env.agents.llm import StaticContextAgent

    agent = StaticContextAgent(
        provider="openai", model="stand-in", base_url=sys.argv[1], api_key="k", cache=sys.argv[2], timeout=5.0
    )
    sys.stdin.readline()  # start together
    replies = [agent.call_model(agent.chat_model, [HumanMessage(f"q{i % 20}")]).content for i in range(40)]
    print(json.dumps(replies))
    """
)


@pytest.mark.slow
def test_two_agent_processes_share_one_cache(fresh: StandIn, tmp_path: Path) -> None:
    """Both ask the same 20 questions twice: a question both missed at once is stored once (the first
    answer), and from then on both replay that one answer."""
    cache = tmp_path / "replies.sqlite"
    fresh.play(*numbered(40))
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", AGENT, fresh.base_url, str(cache)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    _go(*workers)
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0]
    _intact(cache)
    assert 20 <= len(fresh.requests) <= 40
    fresh.play(default=ok("```\nwrong\n```"))
    agent = StaticContextAgent(**options(fresh, cache))
    stored = [ask_plain(agent, f"q{i}") for i in range(20)]
    assert fresh.requests == [] and len(set(stored)) == 20
    for replies in (json.loads(out) for out in outputs):
        assert replies[20:] == stored  # the second round of each process: the stored answers


def ask_plain(agent: StaticContextAgent, text: str) -> str:
    """The reply's text to one user message, without a system message (as the worker processes ask)."""
    return str(agent.call_model(agent.chat_model, [HumanMessage(text)]).content)


def test_a_garbage_file_is_one_line_naming_it(fresh: StandIn, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all\n" * 200)
    with pytest.raises(DataError) as caught:
        make_agent("llm-static", **options(fresh, garbage))
    message = str(caught.value)
    assert "\n" not in message and str(garbage) in message and "not a readable response cache" in message
    assert fresh.requests == []


def test_a_truncated_cache_is_one_line_naming_it(tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    replies = ResponseCache(cache)
    for i in range(200):
        replies.put(f"k{i}", AIMessage("x" * 3000))
    replies.close()
    data = cache.read_bytes()
    cache.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as caught:
        ResponseCache(cache).get("k199")
    assert "\n" not in str(caught.value) and str(cache) in str(caught.value)


def test_another_sqlite_file_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE people (name TEXT)")
    db.close()
    with pytest.raises(DataError, match="not a themisto response cache"):
        ResponseCache(other)
    with sqlite3.connect(other) as db:  # and left as it was
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["people"]
    db.close()


def test_a_damaged_row_is_one_line_naming_the_file(tmp_path: Path) -> None:
    cache = tmp_path / "replies.sqlite"
    replies = ResponseCache(cache)
    replies.put("k", AIMessage("fine"))
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE replies SET message = '{\"broken'")
    db.close()
    with pytest.raises(DataError) as caught:
        replies.get("k")
    assert "\n" not in str(caught.value) and str(cache) in str(caught.value)


def test_the_cli_reports_a_garbage_cache_in_one_line(
    env_dataset: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(bytes(range(256)) * 20)
    agent_options = {"provider": "openai", "model": "m", "api_key": "k", "cache": str(garbage)}
    cfg = {"agent": "llm-static", "agent_options": agent_options, "data": env_dataset["dataset"], "task": "output"}
    cfg["env"] = {"snapshot_dir": env_dataset["snapshot_dir"]}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    code, err = cli(monkeypatch, capsys, "run", "-c", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out"))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert str(garbage) in err and "not a readable response cache" in err


def test_the_cache_pickles_by_path(tmp_path: Path) -> None:
    import pickle

    replies = ResponseCache(tmp_path / "replies.sqlite")
    replies.put("k", AIMessage("hi"))
    copy = pickle.loads(pickle.dumps(replies))
    reply = copy.get("k")
    assert reply is not None and reply.content == "hi" and is_cached(reply)


def test_concurrent_async_tasks_share_one_cache(fresh: StandIn, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "replies.sqlite")
    agents = [StaticContextAgent(**options(fresh, None)) for _ in range(4)]
    for agent in agents:
        agent.cache = cache

    async def main() -> list[Any]:
        calls = [a.acall_model(a.chat_model, [HumanMessage(f"q{i}")]) for i, a in enumerate(agents)]
        return await asyncio.gather(*calls)

    fresh.play(default=ok("```\nsame\n```"))
    assert all(not is_cached(r) for r in asyncio.run(main()))
    assert all(is_cached(r) for r in asyncio.run(main()))
    assert len(fresh.requests) == 4 and len(cache) == 4
