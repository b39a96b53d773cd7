"""The verifiers 0.4 environment (``vf-eval themisto-env``) evaluated against a stand-in OpenAI-compatible model
server on 127.0.0.1: the model's tool calls reach the real kernel (through verifiers' chat program, its
interception server and the taskset's MCP tool server), and each rollout's reward is the one score the
in-process TRL tool env gives the same calls.

The evaluation runs in a child process started outside the repository, as a user's ``vf-eval`` would
(the repository root on ``sys.path`` would put its ``agents/`` folder where other packages look for theirs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("verifiers") is None:
    pytest.skip("verifiers is not installed", allow_module_level=True)  # the verifiers extra (dev has it)

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from themisto_env.bridges.rl.tool_env import ROLLOUT_TOOLS, SUBMIT_INSTRUCTION, SharedStates, ThemistoToolEnv
from themisto_env.bridges.vf_env import TASKSET_ID

PREDICTION = "print(df.head())"


def _reply(messages: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """The stand-in model: list_variables, then submit the same prediction, then a closing word (the model
    ``silent``: the closing word at once, no tool called)."""
    tool_turns = [m for m in messages if m.get("role") == "tool"]
    if model == "silent":
        return {"role": "assistant", "content": "Done."}
    if not tool_turns:
        call = {"name": "list_variables", "arguments": "{}"}
    elif len(tool_turns) == 1:
        call = {"name": "submit", "arguments": json.dumps({"prediction": PREDICTION})}
    else:
        return {"role": "assistant", "content": "Done."}
    tool_call = {"id": f"call_{len(tool_turns)}", "type": "function", "function": call}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    """A stand-in OpenAI-compatible chat completions server on a free loopback port (a thread here), plain
    or streamed (server-sent events) as the request asks."""
    app = FastAPI()
    seen: list[dict[str, Any]] = []

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Any:
        body = await request.json()
        seen.append(body)
        message = _reply(body["messages"], body["model"])
        head = {"id": f"chatcmpl-{len(seen)}", "created": int(time.time()), "model": body["model"]}
        finish = "tool_calls" if "tool_calls" in message else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        # streamed (verifiers' interception asks for it): the whole message in one delta, then the end
        delta = {**message, "tool_calls": [{"index": i, **c} for i, c in enumerate(message.get("tool_calls", []))]}
        chunks = [
            {"index": 0, "delta": delta, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": finish},
        ]
        events = [{**head, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
        events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return StreamingResponse(iter([text]), media_type="text/event-stream")

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the stand-in model server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _vf_eval(model_url: str, out: Path, *options: str, model: str = "stand-in") -> list[dict[str, Any]]:
    """``vf-eval themisto-env`` (verifiers 0.4's command, beside this Python) on 2 samples against the
    stand-in model, run from ``out`` (outside the repository); the traces it wrote."""
    fixed = (
        "--env.taskset.limit 2 --env.agent.runtime.type subprocess --env.agent.max-turns 8 -n 2 --no-push "
        "--no-rich --client.api-key-var STAND_IN_KEY --run.name themisto"
    )
    vf_eval = str(Path(sys.executable).parent / "vf-eval")
    done = subprocess.run(
        [vf_eval, TASKSET_ID, *options, *fixed.split(), "-m", model, "--client.base-url", model_url, "-o", str(out)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "STAND_IN_KEY": "stand-in"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    episodes = [json.loads(line) for line in (out / "themisto" / "traces.jsonl").read_text().splitlines()]
    return [trace for episode in episodes for trace in episode["traces"]]


def _same_calls_in_process(
    task: str, sample_id: str, *, calls: bool = True, **options: Any
) -> tuple[str, float | None]:
    """The TRL tool env given the stand-in model's calls (``calls``: else none): list_variables' answer and
    the reward."""
    with SharedStates(task=task, **options) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=sample_id)
        answer = rollout.list_variables() if calls else ""
        if calls:
            rollout.submit(PREDICTION)
        return answer, rollout.get_reward()


@pytest.mark.slow
def test_vf_eval_scores_rollouts_with_the_one_score(
    model_url: str, tmp_path: Path, env_dataset: dict[str, str]
) -> None:
    options = {**env_dataset, "tool_budget": 2}
    traces = _vf_eval(model_url, tmp_path, "--env.taskset.options", json.dumps(options))
    assert len(traces) == 2 and all(t["ok"] and not t["errors"] for t in traces), traces
    offered = {tool["name"]: tool for tool in traces[0]["tools"]}  # the tools as the model was offered them
    assert sorted(offered) == sorted(tool.name for tool in ROLLOUT_TOOLS)
    for tool in ROLLOUT_TOOLS:  # the model sees the table's arguments
        assert list(offered[tool.name]["parameters"]["properties"]) == list(tool.args_model.model_fields)
    for trace in traces:
        sample_id = trace["task"]["data"]["sample_id"]
        answer, reward = _same_calls_in_process("next-cell", sample_id, **options)
        assert trace["rewards"]["themisto_reward"]["score"] == pytest.approx(reward)
        assert trace["metrics"]["untrusted"] == 0.0
        tool_answers = [_text(n["message"]) for n in trace["nodes"] if n["message"]["role"] == "tool"]
        assert tool_answers[0] == answer  # the live kernel's answer reached the model


@pytest.mark.slow
def test_a_rollout_without_tool_calls_is_scored_as_the_tool_env_scores_it(
    model_url: str, tmp_path: Path, env_dataset: dict[str, str]
) -> None:
    """No call reached the tool server: the task scores the rollout itself (nothing submitted)."""
    options = ("--env.taskset.themisto-task", "output", "--env.taskset.options", json.dumps(env_dataset))
    traces = _vf_eval(model_url, tmp_path, *options, model="silent")
    assert len(traces) == 2 and all(t["ok"] and not t["errors"] for t in traces), traces
    for trace in traces:
        assert not [n for n in trace["nodes"] if n["message"]["role"] == "tool"]
        _, reward = _same_calls_in_process("output", trace["task"]["data"]["sample_id"], calls=False, **env_dataset)
        assert trace["rewards"]["themisto_reward"]["score"] == pytest.approx(reward)
        assert trace["metrics"]["untrusted"] == 0.0


@pytest.mark.slow  # importing verifiers takes seconds
def test_load_environment_is_the_taskset_vf_eval_runs(env_dataset: dict[str, str]) -> None:
    import verifiers.v1 as vf

    from themisto_env.bridges.vf_env import load_environment

    env = load_environment("output", limit=3, tool_budget=1, **env_dataset)
    assert isinstance(env, vf.Env) and type(env.taskset).__name__ == "ThemistoTaskset"
    tasks = list(env.taskset)
    assert len(tasks) == 3 and all(t.data.sample_id.split("/")[1] == "output" for t in tasks)
    assert tasks[0].data.prompt[-1].content.endswith(SUBMIT_INSTRUCTION)
    assert "1 tool call" in tasks[0].data.prompt[-1].content
    assert type(env._harnesses["agent"]).__name__ == "ThemistoHarness"


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)
