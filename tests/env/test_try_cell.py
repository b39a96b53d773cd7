"""The ``try_cell`` tool: a candidate next cell runs in a disposable kernel at the current state.

Real kernels on the bundled data (one test on docker): the answer shows the candidate's outputs, status
and changed variables; it costs a tool call; hostile candidates are answered and never reach the env's
kernel or later samples; the answer holds nothing but the candidate's own run; the output task refuses.
The answer's format is checked without kernels, with a stand-in for the disposable kernels.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from themisto_env.env import config as env_module
from themisto_env.env.actions import Prediction, encode_action, parse_action
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.tools import TOOL_NAMES, ToolCall, ToolContext, langchain_tools, run_tool
from themisto_env.env.tools._try import NOT_AVAILABLE
from themisto_env.errors import InfrastructureError
from themisto_env.sandbox.kernel.helper import OPTIONS_KEY
from themisto_env.sandbox.rendering import render_outputs
from themisto_env.state.check import expected_fingerprint
from themisto_env.state.copies import CodeRun, DisposableKernels

TRAJECTORY = "diabetes-regression-b2738d8c"  # bundled: X (DataFrame), y (array), diabetes (Bunch) early on
SAMPLE = 2  # its step 3, `X.shape, y.shape, y[:10]`: a target with a distinctive output
STEP = 3

MakeEnv = Callable[..., ThemistoEnv]


def try_cell(code: str) -> ToolCall:
    return ToolCall(tool="try_cell", args={"code": code})


@pytest.fixture
def make_env() -> Iterator[MakeEnv]:
    """``make_env(**options)``: a next-cell env in tools mode on the bundled data (local), closed after."""
    opened: list[ThemistoEnv] = []

    def make(**options: Any) -> ThemistoEnv:
        env = ThemistoEnv(**{"task": "next-cell", "observation": "tools", "backend": "local", **options})
        opened.append(env)
        return env

    yield make
    for env in opened:
        env.close()


def env_state(env: ThemistoEnv) -> tuple[Any, ...]:
    """What a candidate must never change: the env kernel's namespace (ids, ``_``, ``Out``, counter), its
    fingerprint (display options included), its process and its restarts."""
    kernel = env.episode.tool_context().kernel
    return kernel.introspect.namespace_state(), kernel.introspect.fingerprint(), kernel.launcher.pid(), kernel.restarts


def table_rows(text: str) -> dict[str, str]:
    """The rows of the answer's changed-variables table, by name."""
    lines = text.split("changed variables", 1)[1].splitlines()[2:]
    return {line.split()[0]: line for line in lines if line.strip() and not line.startswith("display options")}


# -- on real kernels -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_answer_shows_outputs_and_changed_variables_and_costs_a_call(make_env: MakeEnv) -> None:
    env = make_env(tool_budget=3)
    obs, info = env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})
    assert "try_cell" in info["tool_names"] and obs["tools_left"] == 3
    before = env_state(env)
    code = (
        "candidate_total = 40 + 2\nX = X.assign(extra=1)\ndel diabetes\n"
        "print('hello from the candidate')\ncandidate_total"
    )
    obs, reward, terminated, _, info = env.step(encode_action(try_cell(code)))  # as a Dict-space action
    text = obs["tool_result"]
    assert reward == pytest.approx(-env.episode.config.tool_cost) and not terminated
    assert obs["tools_left"] == 2 and info["tool_result"]["ok"], text
    assert "status: ok" in text and "hello from the candidate\n42" in text
    rows = table_rows(text)
    assert rows["candidate_total"].split() == ["candidate_total", "int", "created"]
    assert rows["X"].split()[:3] == ["X", "pandas.DataFrame", "(442,"]
    assert "(442, 11)" in rows["X"] and rows["X"].endswith("changed (was pandas.DataFrame (442, 10))")
    assert rows["diabetes"].endswith("deleted")
    assert set(rows) == {"candidate_total", "X", "diabetes"}  # unchanged names (y) are not listed
    assert env_state(env) == before, "try_cell touched the env's kernel"

    obs, _, _, _, info = env.step(try_cell("undefined_name + 1"))
    assert obs["tools_left"] == 1
    assert "status: raised NameError: name 'undefined_name' is not defined" in obs["tool_result"]
    assert "changed variables: none" in obs["tool_result"]

    _, _, _, _, info = env.step(Prediction(text=env.episode.trajectories[TRAJECTORY].steps[STEP].source))
    assert [call["tool"] for call in info["tool_calls"]] == ["try_cell", "try_cell"]
    assert info["scores"]["exact_match"] == 1.0 and "infrastructure_error" not in info


def test_the_budget_counts_try_cell_like_any_tool(make_env: MakeEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []

    def counted(self: DisposableKernels, trajectory: Any, step: int, code: str, *, timeout_s: float) -> CodeRun:
        runs.append(code)
        return CodeRun("ok", [{"output_type": "stream", "name": "stdout", "text": "ran\n"}], changed={})

    monkeypatch.setattr(DisposableKernels, "run", counted)
    env = make_env(tool_budget=1)
    env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})
    obs, reward, _, _, _ = env.step(try_cell("1 + 1"))
    assert (
        obs["tools_left"] == 0
        and reward == pytest.approx(-env.episode.config.tool_cost)
        and "ran" in obs["tool_result"]
    )
    obs, reward, _, _, info = env.step(try_cell("2 + 2"))  # no calls left: refused, the sample stays open
    assert info["tool_refused"] and "scores" not in info and reward == 0.0 and "budget" in obs["tool_result"]
    _, _, _, _, info = env.step(Prediction(text=""))
    assert [call["tool"] for call in info["tool_calls"]] == ["try_cell"]
    assert runs == ["1 + 1"]


def test_a_failure_to_serve_the_state_is_infrastructure_not_the_agents(
    make_env: MakeEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: DisposableKernels, trajectory: Any, step: int, code: str, *, timeout_s: float) -> CodeRun:
        raise InfrastructureError("the disposable kernel's state differs from the recording")

    monkeypatch.setattr(DisposableKernels, "run", broken)
    env = make_env(tool_budget=2)
    env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})
    before = env_state(env)
    obs, _, _, _, info = env.step(try_cell("1 + 1"))
    assert obs["tools_left"] == 2, "not counted: not the agent's fault"
    assert "the disposable kernel's state differs" in info["infrastructure_error"]
    assert "the sandbox failed" in obs["tool_result"] and "tool_result" not in info
    assert env_state(env) == before, "the env's own kernel is fine: neither restarted nor served again"
    _, _, _, _, info = env.step(Prediction(text="X.shape"))
    assert "the disposable kernel's state differs" in info["infrastructure_error"]  # the sample is flagged


@pytest.mark.slow
def test_hostile_candidates_are_answered_and_reach_nothing(make_env: MakeEnv) -> None:
    env = make_env(tool_budget=5, execution_score=True, limits={"timeout_s": 5})
    trajectory = env.episode.trajectories[TRAJECTORY]
    env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})
    before = env_state(env)
    hostile = {
        "import os; os._exit(1)": "status: failed (exit): the kernel died while it ran",
        "while True:\n    pass": "status: failed (timeout): it ran past 5 s",
        "import pandas as pd\npd.set_option('display.max_rows', 3)\npd.set_option('display.precision', 1)\n"
        "hostile = 1": "display options (pandas/numpy): changed",
        "import threading, time\ndef later():\n    global X\n    time.sleep(0.5)\n    X = 'mutated later'\n"
        "threading.Thread(target=later, daemon=True).start()": "status: ok",
    }
    for code, expected in hostile.items():
        obs, _, terminated, _, info = env.step(try_cell(code))
        assert not terminated and "infrastructure_error" not in info, info
        assert info["tool_result"]["ok"] and expected in obs["tool_result"], obs["tool_result"]
    time.sleep(1)  # the thread's mutation, had it reached this kernel
    assert env_state(env) == before, "a candidate reached the env's kernel"

    tried = score_samples(env, trajectory, 2)
    env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})  # the same samples, nothing tried
    assert score_samples(env, trajectory, 2) == tried, "the tries changed a score"
    assert [row["sample"] for row in tried] == [
        s.id for s in env.episode.episode_samples[TRAJECTORY][SAMPLE : SAMPLE + 2]
    ]
    for row in tried:
        assert row["check"] == "verified" and row["exact_match"] == 1.0, row
        assert row["infrastructure_error"] is row["state_mismatch"] is row["prediction_failed"] is None, row


def score_samples(env: ThemistoEnv, trajectory: Any, n: int) -> list[dict[str, Any]]:
    """Predict the next ``n`` targets exactly (execution score on); what each scored row says."""
    rows = []
    for _ in range(n):
        step = env.episode.current_sample.step
        assert env.episode.tool_context().kernel.introspect.fingerprint() == expected_fingerprint(trajectory, step)
        _, _, _, _, info = env.step(Prediction(text=trajectory.steps[step].source))
        rows.append(
            {
                "sample": info["scored_sample_id"],
                "check": info["scored_state"]["check"],
                "exact_match": info["scores"]["exact_match"],
                **{key: info.get(key) for key in ("execution_score", "execution")},
                **{key: info.get(key) for key in ("infrastructure_error", "state_mismatch", "prediction_failed")},
            }
        )
    return rows


@pytest.mark.slow
def test_trying_the_target_reveals_only_the_candidates_own_run(
    make_env: MakeEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[CodeRun] = []
    real_run = DisposableKernels.run

    def spied(self: DisposableKernels, *args: Any, **kwargs: Any) -> CodeRun:
        runs.append(real_run(self, *args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(DisposableKernels, "run", spied)
    env = make_env(tool_budget=2)
    trajectory = env.episode.trajectories[TRAJECTORY]
    target = trajectory.steps[STEP]
    recorded = [render_outputs(step.outputs) for step in trajectory.steps[STEP:]]
    later = [step.source for step in trajectory.steps[STEP:]]
    _, served = env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})

    obs, _, _, _, info = env.step(try_cell("unrelated = 1"))
    text = obs["tool_result"]
    assert "status: ok" in text and "(no output)" in text
    for leak in [*recorded, *later]:
        for line in (part for part in leak.splitlines() if len(part.strip()) >= 8):
            assert line not in text and line not in repr(info), f"recorded text leaks: {line!r}"

    obs, _, _, _, info = env.step(try_cell(target.source))
    text = obs["tool_result"]
    produced = render_outputs(runs[-1].outputs)
    assert produced and produced in text  # the candidate's own outputs (which equal the target's: it is the target)
    assert target.source not in text, "the candidate is not echoed back"
    rest = text.replace(produced, "")
    assert not any(word in rest.lower() for word in ("target", "recorded", "match", "score", "correct"))
    assert "scores" not in info and set(info) == set(served) | {"tool_result"}
    assert len(runs) == 2

    _, _, _, _, info = env.step(Prediction(text="X.head()"))  # scored as usual, whatever was tried
    assert info["scores"]["exact_match"] == 0.0 and info["tool_calls"][1]["args"] == {"code": target.source}


@pytest.mark.slow
def test_the_output_task_refuses_in_one_line() -> None:
    env = ThemistoEnv(task="output", observation="tools", backend="local", tool_budget=2)
    try:
        obs, info = env.reset(options={"sample": 1})
        assert "try_cell" not in info["tool_names"], "not offered to agents where it would reveal the output"
        assert "try_cell" in TOOL_NAMES  # the action space is the same for both tasks
        sample = env.episode.current_sample
        obs, _, _, _, info = env.step(
            try_cell(env.episode.trajectories[sample.trajectory_id].steps[sample.step].source)
        )
        assert not info["tool_result"]["ok"] and obs["tools_left"] == 1  # costs a call, like any failing tool
        assert obs["tool_result"] == f"Error: {NOT_AVAILABLE}" and "\n" not in obs["tool_result"]
        assert env.episode.scorer.provider.disposable is None, "nothing ran"
    finally:
        env.close()


@pytest.mark.slow
def test_the_local_backend_warns_once_when_a_cell_is_first_tried(
    make_env: MakeEnv, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setattr(env_module, "_WARNED_UNISOLATED", set())
    with caplog.at_level(logging.WARNING, logger="themisto_env"):
        env = make_env(tool_budget=3)
        try:
            env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})
            assert not [r for r in caplog.records if "try_cell" in r.getMessage()], "nothing model-written ran yet"
            env.step(try_cell("1 + 1"))
            env.step(try_cell("2 + 2"))
        finally:
            env.close()
    warned = [r.getMessage() for r in caplog.records if "not isolated" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("the try_cell tool runs model-written code on the local")


def test_docker(make_env: MakeEnv, docker_engine: None) -> None:
    env = make_env(backend="docker", tool_budget=2)
    env.reset(options={"trajectory": TRAJECTORY, "sample": SAMPLE})
    before = env_state(env)
    code = "import pandas as pd\npd.set_option('display.max_rows', 3)\nX['double_bmi'] = X['bmi'] * 2\nX.shape"
    obs, _, _, _, info = env.step(try_cell(code))
    text = obs["tool_result"]
    assert info["tool_result"]["ok"] and "status: ok" in text and "(442, 11)" in text, text
    assert table_rows(text)["X"].endswith("changed (was pandas.DataFrame (442, 10))")
    assert "display options (pandas/numpy): changed" in text
    obs, _, _, _, _ = env.step(try_cell("import os; os._exit(1)"))
    assert "status: failed (exit)" in obs["tool_result"]
    assert env_state(env) == before


# -- the answer, without kernels --------------------------------------------------------------------------


BEFORE = {
    "frame": "pandas.DataFrame|4x3|abc",
    "items": "list|len3|def",
    "gone": "numpy.ndarray|10|123",
    "same": "int||1",
}


def context(run: CodeRun | None, **options: Any) -> ToolContext:
    """A context whose try_code answers with ``run`` (None: trying is not allowed here)."""
    try_code = (lambda code: run) if run is not None else None
    return ToolContext(kernel=None, try_code=try_code, recorded_fingerprint=BEFORE, **options)  # type: ignore[arg-type]


def answer(ctx: ToolContext, code: str = "x = 1") -> str:
    result = run_tool(try_cell(code), ctx)
    assert result.ok, result.text
    assert len(result.text) <= ctx.max_chars
    return result.text


def test_created_changed_and_deleted_variables_are_told_apart() -> None:
    changed = {
        "frame": "pandas.DataFrame|4x4|fff",
        "items": "list|len3|eee",
        "gone": "<deleted>||",
        "new": "numpy.ndarray|2x3x4|000",
        "scalar": "float||9",
        OPTIONS_KEY: "options|len1|77",
    }
    text = answer(context(CodeRun("ok", [], changed=changed)))
    rows = table_rows(text)
    assert rows["frame"].split() == [
        "frame",
        "pandas.DataFrame",
        "(4,",
        "4)",
        "changed",
        "(was",
        "pandas.DataFrame",
        "(4,",
        "3))",
    ]
    assert rows["items"].split() == ["items", "list", "len", "3", "changed"]
    assert rows["gone"].split() == ["gone", "numpy.ndarray", "(10,)", "deleted"]
    assert rows["new"].split() == ["new", "numpy.ndarray", "(2,", "3,", "4)", "created"]
    assert rows["scalar"].split() == ["scalar", "float", "created"]
    assert "same" not in rows and OPTIONS_KEY not in text
    assert text.endswith("display options (pandas/numpy): changed")
    assert "outputs:\n(no output)" in text


def test_without_a_recorded_state_variables_are_only_set() -> None:
    ctx = context(CodeRun("ok", [], changed={"frame": "pandas.DataFrame|4x4|fff"}))
    ctx.recorded_fingerprint = None
    assert table_rows(answer(ctx))["frame"].split()[-1] == "set"


@pytest.mark.parametrize(
    ("run", "status"),
    [
        (
            CodeRun("error", [{"output_type": "error", "ename": "KeyError", "evalue": "'x'", "traceback": []}], {}),
            "status: raised KeyError: 'x'",
        ),
        (CodeRun("failed", failure="timeout", detail="it ran past 30 s"), "status: failed (timeout): it ran past 30 s"),
        (
            CodeRun("failed", failure="memory", detail="out of memory (1 process(es) killed at the memory limit)"),
            "status: failed (memory): out of memory (1 process(es) killed at the memory limit)",
        ),
        (
            CodeRun("failed", failure="exit", detail="kernel /tmp/run-1234 died"),
            "status: failed (exit): the kernel died while it ran (it exited or crashed)",
        ),
        (
            CodeRun("failed", failure="tampered", detail="the measurement missed canaries ['canary_1']"),
            "status: failed (tampered): it interfered with the measurement of its effects",
        ),
    ],
)
def test_status_lines(run: CodeRun, status: str) -> None:
    text = answer(context(run))
    assert status in text.splitlines()
    assert "canary" not in text and "/tmp/" not in text  # the machinery's details stay in the logs
    if run.changed is None:
        assert text.endswith("changed variables: not measured (the run failed)")


def test_the_answer_is_bounded_and_keeps_the_end_of_the_outputs_and_the_variables() -> None:
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "line of output\n" * 5000},
        {"output_type": "error", "ename": "ValueError", "evalue": "at the very end", "traceback": []},
    ]
    changed = {f"v{i:03d}": "int||1" for i in range(200)}
    text = answer(context(CodeRun("error", outputs, changed=changed), max_chars=3000, max_rows=20))
    assert "ValueError: at the very end" in text and "characters cut" in text
    assert "changed variables (the first 20 of 200 by name):" in text
    assert "v019" in text and "v020" not in text


def test_refusals_and_bad_arguments_are_answered() -> None:
    refused = run_tool(try_cell("print(1)"), context(None))
    assert not refused.ok and refused.error == NOT_AVAILABLE
    empty = run_tool(try_cell("   \n"), context(CodeRun("ok")))
    assert not empty.ok and "empty" in empty.text
    missing = run_tool(ToolCall(tool="try_cell"), context(CodeRun("ok")))
    assert not missing.ok and "'code' is required" in missing.text and "try_cell(code: str)" in missing.text


def test_the_langchain_tool_runs_it_and_reads_refusals_as_errors() -> None:
    run = CodeRun("ok", [{"output_type": "stream", "name": "stdout", "text": "tried\n"}], changed={})
    tools = {tool.name: tool for tool in langchain_tools(lambda: context(run))}
    assert list(tools) == list(TOOL_NAMES) and "disposable" in tools["try_cell"].description
    assert "tried" in tools["try_cell"].invoke({"code": "print('tried')"})
    refusing = {tool.name: tool for tool in langchain_tools(lambda: context(None))}["try_cell"]
    message = refusing.invoke({"type": "tool_call", "name": "try_cell", "args": {"code": "1"}, "id": "c1"})
    assert isinstance(message, ToolMessage) and message.status == "error" and NOT_AVAILABLE in str(message.content)


def test_the_action_space_carries_it() -> None:
    call = try_cell("x = 1")
    encoded = encode_action(call)
    assert encoded["tool"] == TOOL_NAMES.index("try_cell") == len(TOOL_NAMES) - 1  # appended: indices kept
    assert parse_action(encoded) == call
