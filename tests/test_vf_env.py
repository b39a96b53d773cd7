"""The verifiers environment (``load_environment``) evaluated against a stand-in OpenAI-compatible model
server on 127.0.0.1: the model's tool calls reach the real kernel, and each rollout's reward is the one
score the in-process TRL tool env gives the same calls.

The evaluation runs in a child process started outside the repository: verifiers imports the OpenAI Agents
SDK, whose import name ``agents`` the repository's own ``agents/`` folder shadows when the repository root
is on ``sys.path`` (as it is under ``python -m pytest`` here); a user's ``vf-eval`` runs from elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
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
    pytest.skip("verifiers is not installed", allow_module_level=True)

import uvicorn
from fastapi import FastAPI, Request

from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv
from themisto_env.bridges.vf_env import TOOL_NAMES

PREDICTION = "print(df.head())"


def _reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The stand-in model: list_variables, then submit the same prediction, then a closing word."""
    tool_turns = [m for m in messages if m.get("role") == "tool"]
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
    """A stand-in OpenAI-compatible chat completions server on a free loopback port (a thread here)."""
    app = FastAPI()
    seen: list[dict[str, Any]] = []

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        seen.append(body)
        message = _reply(body["messages"])
        return {
            "id": f"chatcmpl-{len(seen)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

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


EVALUATE = """
import json, sys
from openai import AsyncOpenAI
from themisto_env.bridges.vf_env import load_environment

env = load_environment("next-cell", limit=2, tool_budget=2)
client = AsyncOpenAI(base_url=sys.argv[1], api_key="stand-in")
results = env.evaluate_sync(client=client, model="stand-in", num_examples=2, rollouts_per_example=1)
print(json.dumps({"tools": env.oai_tools, "outputs": [
    {key: output.get(key) for key in ("reward", "metrics", "info", "completion", "error")}
    for output in results["outputs"]
]}, default=str))
"""


def test_load_environment_scores_rollouts_with_the_one_score(model_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EVALUATE, model_url], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(t["function"]["name"] for t in result["tools"]) == sorted(TOOL_NAMES)
    schema = next(t for t in result["tools"] if t["function"]["name"] == "inspect_variable")["function"]
    assert list(schema["parameters"]["properties"]) == ["name"]  # the rollout is hidden from the model
    outputs = result["outputs"]
    assert len(outputs) == 2 and all(o["error"] is None for o in outputs), outputs
    with SharedStates(task="next-cell", tool_budget=2) as states:
        for output in outputs:
            rollout = ThemistoToolEnv(states)
            rollout.reset(sample_id=output["info"]["sample_id"])
            answer = rollout.list_variables()
            rollout.submit(PREDICTION)
            assert output["reward"] == pytest.approx(rollout.get_reward())
            assert output["metrics"]["untrusted"] == 0.0
            tool_answers = [m["content"] for m in output["completion"] if m["role"] == "tool"]
            assert tool_answers[0] == answer  # the live kernel's answer reached the model
