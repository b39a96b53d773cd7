"""No silent faults: a machinery fault is the same infrastructure fault on every path, never a tool's answer
and never a score.

Each fault is injected with real kernels on each path that serves a sample's tools and scores it:

- ``start``: no kernel can start (a ``sitecustomize`` on ``PYTHONPATH`` ends every kernel and template
  process at its start, as a broken kernel environment would);
- ``host``: the host refuses what a start needs (the run directories' root is a file: making a run
  directory raises an ``OSError``, as a full or vanished ``/tmp`` would; the ``ZMQError`` of a socket path
  too long was this kind, and TRL showed the model its text as the tool's answer);
- ``kernel``: the kernel serving the sample is SIGKILLed by its pid after a first tool call;
- ``template``: the kernel template the sample's kernel was forked from is SIGKILLed by its pid (its
  kernels go with it) after a first tool call.

The paths: the gym env, ``Episode``, TRL's tool env, verifiers' tool server and reward, OpenEnv's
environment, inspect (sandbox, tools, scorer) and the runner's row. On each: every tool answer the model is
shown after the fault is the env's one sandbox-failed text (no error text of the machinery), and the sample
is reported as an infrastructure fault with no reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from themisto_env.agents import BaseAgent
from themisto_env.env.actions import Prediction
from themisto_env.env.record import SANDBOX_FAILED
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import ToolCall
from themisto_env.sandbox.lifetime import run_root as run_roots
from themisto_env.sandbox.template import shared as templates

pytestmark = pytest.mark.slow  # every case starts (or fails to start) kernels on a whole path

#: Tool calls of a sample; the fault strikes where ``STRIKE`` stands (a start fault is there from the start).
STRIKE = "strike"
SCRIPT = ("list_variables", STRIKE, "memory_usage")
PREDICTION = "total(frame)"
#: What the machinery's own errors say: none of it may reach the model as a tool's answer.
FAULT_WORDS = ("Error", "died", "exit code", "injected", "Traceback", "template", "signal")
SITE = """
import os, sys
if any(a == "ipykernel_launcher" or a.endswith("zygote.py") for a in sys.orig_argv):
    sys.stderr.write("injected: this kernel cannot start\\n")
    os._exit(3)
"""


@dataclass
class Verdict:
    """What a path made of the sample: the tool answers the model was shown, whether the sample is reported
    as an infrastructure fault, and its reward (None: not scored)."""

    answers: list[str]
    infrastructure: bool
    reward: float | None


# -- the faults ---------------------------------------------------------------------------------------------


def _is_server(o: object) -> bool:
    """Whether a live object is a `StateServer` (a dead `weakref.proxy` among gc's objects raises on any look)."""
    try:
        return isinstance(o, StateServer)
    except ReferenceError:
        return False


def servers_of(sample_id: str, trajectory_id: str, step: int) -> list[StateServer]:
    """The open state servers of this process serving that sample's state with a kernel."""
    return [
        o
        for o in gc.get_objects()
        if _is_server(o)
        and o.trajectory is not None
        and (o.trajectory.id, o.step) == (trajectory_id, step)
        and o.kernel_owner.started
    ]


def sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):  # a forked kernel is reaped by its template
        psutil.Process(pid).wait(timeout=10)


class Fault:
    """One machinery fault: armed before the path is built, struck after the sample's first tool call."""

    def __init__(self, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sample: Any) -> None:
        self.name, self.sample, self.struck = name, sample, 0
        if name == "start":
            site = tmp_path / "site"
            site.mkdir()
            (site / "sitecustomize.py").write_text(SITE, encoding="utf-8")
            monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
            templates.close_shared_templates()  # no template started before may serve: nothing can start
        if name == "host":  # kernels' run directories are to go in a "folder" that is a file
            blocked = tmp_path / "not-a-folder"
            blocked.write_text("", encoding="utf-8")
            monkeypatch.setattr(run_roots, "run_root", lambda: blocked)
            templates.close_shared_templates()

    def strike(self) -> None:
        if self.name in ("start", "host"):
            self.struck += 1
            return
        servers = servers_of(self.sample.id, self.sample.trajectory_id, self.sample.step)
        assert servers, "no open server serves the sample"
        if self.name == "kernel":
            for server in servers:
                pid = server.kernel_owner.kernel.launcher.pid()
                assert pid is not None, "the sample's kernel is not running"
                sigkill(pid)
                self.struck += 1
            return
        with templates._SHARED_LOCK:
            live = [t for t in templates._SHARED.values() if t.is_alive() and t._process is not None]
        for template in live:
            pid = template._process.pid()  # type: ignore[union-attr]
            assert pid is not None
            sigkill(pid)
            self.struck += 1
        for server in servers:  # its kernels watch their parent: they go with it
            kernel = server.kernel_owner.kernel
            assert not kernel.is_alive() or _wait_dead(kernel), "a kernel outlived its template"


def _wait_dead(kernel: Any) -> bool:
    from tests.conftest import wait_for

    return wait_for(lambda: not kernel.is_alive(), 10)


class Steps:
    """The script's steps one tool at a time (the fault struck where it stands)."""

    def __init__(self, fault: Fault) -> None:
        self.steps, self.fault = list(SCRIPT), fault

    def next_tool(self) -> str | None:
        while self.steps:
            step = self.steps.pop(0)
            if step != STRIKE:
                return step
            self.fault.strike()
        return None


# -- the paths ----------------------------------------------------------------------------------------------


def options(env_dataset: dict[str, str]) -> dict[str, Any]:
    return {"task": "next-cell", "tool_budget": 5, "tool_cost": 0.05, **env_dataset}


def via_gym(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    from themisto_env.env.core import ThemistoEnv

    with ThemistoEnv(**opts) as env:
        env.reset(options={"sample": sample.id})
        steps, answers = Steps(fault), []
        while (tool := steps.next_tool()) is not None:
            obs, *_ = env.step(ToolCall(tool=tool))
            answers.append(obs["tool_result"])
        *_, info = env.step(Prediction(text=PREDICTION))
    return Verdict(answers, bool(info.get("infrastructure_error")), info.get("reward"))


def via_episode(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    from themisto_env.env.episode import Episode

    with Episode.open(**opts) as episode:
        episode.reset({"sample": sample.id})
        steps, answers = Steps(fault), []
        while (tool := steps.next_tool()) is not None:
            obs, *_ = episode.step(ToolCall(tool=tool))
            answers.append(obs["tool_result"])
        *_, info = episode.step(Prediction(text=PREDICTION))
    return Verdict(answers, bool(info.get("infrastructure_error")), info.get("reward"))


def via_trl(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv

    with SharedStates(**opts) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=sample.id)
        steps, answers = Steps(fault), []
        while (tool := steps.next_tool()) is not None:
            answers.append(getattr(rollout, tool)())
        rollout.submit(f"```python\n{PREDICTION}\n```")
        reward = rollout.get_reward()
        assert rollout.last_score is not None
        return Verdict(answers, bool(rollout.last_score.infrastructure_error and rollout.untrusted), reward)


def via_verifiers(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    pytest.importorskip("verifiers", reason="verifiers is not installed (pip install -e '.[verifiers]')")
    from verifiers.v1.errors import RolloutError

    from themisto_env.bridges.vf_taskset import ThemistoState, ThemistoTask, ThemistoTools, ThemistoToolsConfig

    tools = ThemistoTools(ThemistoToolsConfig(states=opts))
    asyncio.run(tools.setup())
    try:
        steps, answers = Steps(fault), []
        while (tool := steps.next_tool()) is not None:
            answers.append(tools._run("rollout-1", sample.id, tool, {})[0])
        _, reward, why = tools._run("rollout-1", sample.id, "submit", {"prediction": PREDICTION})
        untrusted = bool(why)
        state = ThemistoState(
            rollout="rollout-1", sample_id=sample.id, scored=True, reward=reward, untrusted=untrusted, why=why
        )
        trace = SimpleNamespace(state=state)
        task = ThemistoTask.__new__(ThemistoTask)
        try:  # what verifiers records on the trace: a reward, or the rollout's error (no reward)
            scored: float | None = asyncio.run(task.themisto_reward(trace))  # type: ignore[arg-type]
            infrastructure = bool(untrusted)
        except RolloutError as exc:
            scored, infrastructure = None, "infrastructure" in str(exc).lower()
        return Verdict(answers, infrastructure, scored)
    finally:
        tools._states.close()


def via_openenv(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    from themisto_env.bridges.openenv.environment import ThemistoServedEnv
    from themisto_env.bridges.openenv.models import ThemistoAction

    env = ThemistoServedEnv(opts)
    try:
        env.reset(sample_id=sample.id)
        steps, answers = Steps(fault), []
        while (tool := steps.next_tool()) is not None:
            answers.append(env.step(ThemistoAction(kind="tool", tool=tool)).tool_result)
        info = env.step(ThemistoAction(kind="predict", text=PREDICTION)).info
    finally:
        env.close()
    return Verdict(answers, bool(info.get("infrastructure_error")), info.get("reward"))


def via_inspect(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    pytest.importorskip("inspect_ai", reason="inspect_ai is not installed (pip install -e '.[inspect]')")
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage, get_model

    from themisto_env.bridges.inspect_task import themisto

    steps, answers = Steps(fault), []

    def reply(messages: list[Any], tools: list[Any], tool_choice: Any, config: Any) -> ModelOutput:
        if isinstance(messages[-1], ChatMessageTool):  # what the model is shown of its last call
            last = messages[-1]
            answers.append(last.error.message if last.error is not None else last.text)
        tool = steps.next_tool() if tools else None
        if tool is not None:
            output = ModelOutput.for_tool_call("mockllm/model", tool, {})
        else:
            output = ModelOutput.from_content("mockllm/model", f"```python\n{PREDICTION}\n```")
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    task_options = {k: v for k, v in opts.items() if k not in ("task", "dataset")} | {"data": opts["dataset"]}
    task = themisto(**task_options)
    model = get_model("mockllm/model", custom_outputs=reply)
    [log] = inspect_eval(task, model=model, sample_id=sample.id, log_dir=str(tmp_path / "inspect"), display="none")
    assert log.samples is not None
    [done] = log.samples
    if done.error is not None:  # an unscored sample is an error in the log, never a wrong answer
        return Verdict(answers, "InfrastructureError" in done.error.message, None)
    scored = done.scores["themisto_scorer"]  # type: ignore[index]
    assert scored.metadata is not None
    return Verdict(answers, bool(scored.metadata["infrastructure_error"]), scored.metadata["reward"])


#: What the runner's agent was shown, and the fault it strikes (the runner makes the agent by name).
RUNNER: dict[str, Any] = {}


class StrikingAgent(BaseAgent):
    """The runner's agent: the script's tool calls (the fault struck where it stands), then the prediction."""

    name = "striking"
    observation = "tools"

    def start_sample(self, observation: Any, info: Any) -> None:
        self._steps = Steps(RUNNER["fault"])

    def decide(self, observation: Any, info: Any) -> ToolCall | Prediction:
        if observation["tool_result"]:
            RUNNER["answers"].append(observation["tool_result"])
        tool = self._steps.next_tool()
        return ToolCall(tool=tool) if tool is not None else Prediction(text=PREDICTION)


def via_runner(opts: dict[str, Any], sample: Any, fault: Fault, tmp_path: Path) -> Verdict:
    from themisto_env.run.config import RunConfig
    from themisto_env.run.results import read_results
    from themisto_env.run.runner import run

    RUNNER.update(fault=fault, answers=[])
    ids = tmp_path / "sample-ids.txt"
    ids.write_text(sample.id + "\n", encoding="utf-8")
    env = {k: v for k, v in opts.items() if k not in ("task", "dataset")}
    config = RunConfig(
        agent=f"{__name__}:StrikingAgent", observation="tools", sample_ids=str(ids), data=opts["dataset"], env=env
    )
    run(config, tmp_path / "run", progress=False)
    [row] = read_results(tmp_path / "run")
    assert row.sample_id == sample.id
    fields = row.to_dict()
    return Verdict(RUNNER["answers"], bool(fields["infrastructure_error"]), fields["reward"])


PATHS: dict[str, Callable[[dict[str, Any], Any, Fault, Path], Verdict]] = {
    "gym": via_gym,
    "episode": via_episode,
    "trl": via_trl,
    "verifiers": via_verifiers,
    "openenv": via_openenv,
    "inspect": via_inspect,
    "runner": via_runner,
}


@pytest.fixture(scope="module")
def sample(env_dataset: dict[str, str]) -> Any:
    """A next-cell sample with a state to serve (not the first step)."""
    from themisto_env.replay.dataset import Dataset

    dataset = Dataset.open(env_dataset["dataset"])
    return next(s for s in dataset.samples("next-cell") if s.step > 1)


@pytest.mark.parametrize("fault_name", ["start", "host", "kernel", "template"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_machinery_fault_is_never_an_answer_or_a_score(
    path: str,
    fault_name: str,
    sample: Any,
    env_dataset: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    fault = Fault(fault_name, monkeypatch, tmp_path, sample)
    try:
        verdict = PATHS[path](options(env_dataset), sample, fault, tmp_path)
    finally:
        monkeypatch.undo()
        templates.close_shared_templates()  # a killed or refused template is not the next test's
    assert fault.struck, "the fault was never injected"
    assert len(verdict.answers) == 2, verdict.answers
    before, after = verdict.answers
    if fault_name in ("start", "host"):
        assert before == SANDBOX_FAILED, before
    else:
        assert before != SANDBOX_FAILED, before  # a real answer
    assert after == SANDBOX_FAILED, f"{path}: the model was shown {after!r}"
    for answer in verdict.answers:
        assert not any(word in answer for word in FAULT_WORDS), f"{path}: a fault shown as an answer: {answer!r}"
    assert verdict.infrastructure, f"{path}: the fault is not reported as infrastructure ({verdict})"
    assert verdict.reward is None, f"{path}: a machinery fault was scored {verdict.reward}"
