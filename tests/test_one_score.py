"""One score: the same predictions through every path that scores them earn the same reward and flags.

The paths: the gym env's steps, TRL's multi-turn tool env (``get_reward``), TRL's reward functions
(``MetricReward``, ``ExecutionReward``; no tool calls there), the inspect scorer, the runner's row and
pass@k's draws. The cases: with and without tool calls, the execution score off and on, a prediction whose
own code crashes its kernel, and the env's kernel SIGKILLed by its pid after a tool call (before the
prediction is scored, and before a further tool call). Bundled dataset, local backend.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from themisto_env.agents import BaseAgent
from themisto_env.bridges.rl import ExecutionReward, MetricReward
from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv
from themisto_env.data.samples import Sample
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.episode import Episode
from themisto_env.env.info import StepInfo
from themisto_env.env.state_server import StateServer
from themisto_env.env.tools import ToolCall
from themisto_env.metrics import score
from themisto_env.run.config import RunConfig
from themisto_env.run.results import read_results
from themisto_env.run.runner import run
from themisto_env.scoring.rule import RewardWeights, ScoringRule, reward
from themisto_env.scoring.score import SampleScore, score_sample

TOOL_COST = 0.05
#: Half right: it loads the data, as the target does, but builds no frame.
PARTIAL = "from sklearn.datasets import load_wine\ndata = load_wine()"
#: Its own code kills the kernel it runs in: the model's failure, never the machinery's.
CRASH = "import os\nos._exit(1)"
KILL = "kill"  # a script step: SIGKILL the env's kernel by its pid
T = TypeVar("T")
# (A call after a kill is another tool than before it: TRL's shared states answer a repeated call from
# the group's cache, which never reaches the dead kernel.)


@dataclass(frozen=True)
class Case:
    """A prediction, the steps taken before it (tool names, or ``kill``), and the execution score."""

    prediction: str
    script: tuple[str, ...]
    execution: bool

    @property
    def tool_free(self) -> bool:
        return not self.script


CASES = [
    Case(PARTIAL, (), False),
    Case(PARTIAL, ("list_variables",), False),
    Case(CRASH, (), False),
    Case(PARTIAL, ("list_variables", KILL), False),  # killed before the prediction is scored
    Case(PARTIAL, ("list_variables", KILL, "memory_usage"), False),  # a tool call meets the dead kernel
    Case(PARTIAL, (), True),
    Case(PARTIAL, ("list_variables",), True),
    Case(CRASH, (), True),  # the execution reward function meets the crash too
    Case(CRASH, ("list_variables",), True),
    Case(PARTIAL, ("list_variables", KILL), True),
    Case(PARTIAL, ("list_variables", KILL, "memory_usage"), True),
]


def case_id(case: Case) -> str:
    what = "crash" if case.prediction == CRASH else "partial"
    return f"{what}-{'+'.join(case.script) or 'no-tools'}-{'execution' if case.execution else 'metrics'}"


@dataclass(frozen=True)
class Outcome:
    """What a path says of a prediction: its reward and flags (None where a path cannot tell)."""

    reward: float | None
    infrastructure_error: bool
    state_mismatch: bool = False
    prediction_failed: str | None = None

    def same_as(self, other: Outcome) -> bool:
        if (self.reward is None) != (other.reward is None):
            return False
        close = self.reward is None or abs(self.reward - other.reward) < 1e-9  # type: ignore[operator]
        return close and (self.infrastructure_error, self.state_mismatch, self.prediction_failed) == (
            other.infrastructure_error,
            other.state_mismatch,
            other.prediction_failed,
        )


def of_score(scored: SampleScore | dict[str, Any]) -> Outcome:
    fields = scored.model_dump() if isinstance(scored, SampleScore) else scored
    return Outcome(
        fields.get("reward"),
        bool(fields.get("infrastructure_error")),
        bool(fields.get("state_mismatch")),
        fields.get("prediction_failed"),
    )


# -- the injected fault -----------------------------------------------------------------------------------


#: The envs of the module's fixtures (they outlive a case): a kill aimed at the env a run or an inspect
#: sandbox made for itself leaves them alone.
FIXTURE_ENVS: list[Callable[[], list[ThemistoEnv]]] = []
#: One entry per kernel a kill step ended (or found dead): a path whose kill never happened cannot pass as
#: agreeing (inspect turns an error in its model callback into an erred sample, which agrees with little).
KILLED: list[int] = []


def kill_kernel_of(env: Episode | StateServer) -> None:
    """SIGKILL the kernel serving ``env``'s current sample, by its pid, and wait until it is gone.

    A kernel an earlier case killed and nothing has asked since (TRL's shared states answer a repeated call
    from the group's cache) is dead already: that is the state the kill is for."""
    kernel = env.tool_context().kernel
    pid = kernel.launcher.pid()
    if pid is None:
        assert not kernel.launcher.is_alive(), "a live kernel whose pid cannot be read"
        KILLED.append(0)
        return
    os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):  # a forked kernel is reaped by its template, maybe already
        psutil.Process(pid).wait(timeout=10)
    KILLED.append(pid)


def _is_episode(o: object) -> bool:
    """Whether a live object is an `Episode` (a dead `weakref.proxy` among the objects raises on any look)."""
    try:
        return isinstance(o, Episode)
    except ReferenceError:
        return False


def kill_env_kernels(sample_id: str) -> None:
    """SIGKILL the kernel of the env(s) a run or an inspect sandbox of this process made to serve
    ``sample_id`` (found among the live objects: they hold it privately)."""
    spared = {id(getattr(env, "episode", env)) for envs in FIXTURE_ENVS for env in envs()}
    killed = 0
    for episode in [o for o in gc.get_objects() if _is_episode(o) and id(o) not in spared]:
        sample = episode.current_sample
        if sample is None or sample.id != sample_id or episode.state_report is None:
            continue
        if not episode.server.kernel_owner.started:
            continue
        kill_kernel_of(episode)
        killed += 1
    assert killed, f"no open env serves {sample_id}"


class Script:
    """The steps before a prediction, taken one tool call at a time (kills run as they come up)."""

    def __init__(self, steps: tuple[str, ...], kill: Callable[[], None]) -> None:
        self.steps, self.kill = list(steps), kill

    def next_tool(self) -> str | None:
        """The next tool to call, or None: predict now."""
        while self.steps:
            step = self.steps.pop(0)
            if step != KILL:
                return step
            self.kill()
        return None


class ScriptedAgent(BaseAgent):
    """The runner's agent: follows ``script`` (tool calls, kills), then predicts ``prediction``."""

    name = "scripted"
    observation = "tools"

    def __init__(self, prediction: str, script: list[str]) -> None:
        super().__init__()
        self.prediction, self.script = prediction, tuple(script)
        self._steps: Script | None = None

    def start_sample(self, observation: Any, info: Any) -> None:
        self._steps = Script(self.script, lambda: kill_env_kernels(str(info["sample_id"])))

    def decide(self, observation: Any, info: Any) -> ToolCall | Prediction:
        assert self._steps is not None
        tool = self._steps.next_tool()
        return ToolCall(tool=tool) if tool is not None else Prediction(text=self.prediction)


def fenced(prediction: str) -> str:
    return f"```python\n{prediction}\n```"


# -- fixtures -----------------------------------------------------------------------------------------------


def env_options(execution: bool) -> dict[str, Any]:
    return {"task": "next-cell", "tool_cost": TOOL_COST, "tool_budget": 5, "execution_score": execution}


@pytest.fixture(scope="module")
def gym_envs() -> Iterator[dict[bool, ThemistoEnv]]:
    envs = {flag: ThemistoEnv(**env_options(flag)) for flag in (False, True)}
    FIXTURE_ENVS.append(lambda: list(envs.values()))
    yield envs
    for env in envs.values():
        env.close()


@pytest.fixture(scope="module")
def sample(gym_envs: dict[bool, ThemistoEnv]) -> Sample:
    """The bundled data's first next-cell sample (a run is pinned to it by ``sample_ids``)."""
    return gym_envs[False].episode.samples[0]


@pytest.fixture(scope="module")
def shared_states() -> Iterator[dict[bool, SharedStates]]:
    states = {flag: SharedStates(**env_options(flag)) for flag in (False, True)}
    FIXTURE_ENVS.append(lambda: [env for state in states.values() for env in state._owned])
    yield states
    for state in states.values():
        state.close()


# -- the paths ----------------------------------------------------------------------------------------------


def through_gym(env: ThemistoEnv, sample: Sample, case: Case) -> tuple[Outcome, dict[str, Any]]:
    tid, index = next(
        (t, i) for t, samples in env.episode.episode_samples.items() for i, s in enumerate(samples) if s.id == sample.id
    )
    env.reset(options={"trajectory": tid, "sample": index})
    script, total = Script(case.script, lambda: kill_kernel_of(env.episode)), 0.0
    while (tool := script.next_tool()) is not None:
        _, step_reward, _, _, info = env.step(ToolCall(tool=tool))
        assert step_reward == pytest.approx(-TOOL_COST), "each tool step pays the tool cost"
        total += step_reward
    _, step_reward, _, _, info = env.step(Prediction(text=case.prediction))
    total += step_reward
    assert info["scored_sample_id"] == sample.id
    expected_sum = info.get("reward", 0.0)  # an unscored sample's steps sum to 0
    assert total == pytest.approx(expected_sum, abs=1e-9), "the sample's steps sum to SampleScore.reward"
    return of_score(info), info


def through_tool_env(states: SharedStates, sample: Sample, case: Case) -> Outcome:
    rollout = ThemistoToolEnv(states)
    rollout.reset(sample_id=sample.id)
    script = Script(case.script, lambda: kill_kernel_of(states.server_for(sample.id)))
    while (tool := script.next_tool()) is not None:
        getattr(rollout, tool)()
    rollout.submit(fenced(case.prediction))
    value = rollout.get_reward()
    assert rollout.last_score is not None and rollout.last_score.reward == value
    return of_score(rollout.last_score)


def through_reward_function(sample: Sample, case: Case) -> float | None:
    assert case.tool_free
    if not case.execution:
        [value] = MetricReward()(completions=[fenced(case.prediction)], target=[sample.target], task=["next-cell"])
        return value
    with ExecutionReward(**{**env_options(True), "tool_cost": 0.0}) as function:
        [value] = function(completions=[fenced(case.prediction)], sample_id=[sample.id], task=["next-cell"])
    return value


def through_inspect(sample: Sample, case: Case, tmp_path: Path) -> Outcome:
    pytest.importorskip("inspect_ai", reason="inspect_ai is not installed (pip install -e '.[inspect]')")
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    from themisto_env.bridges.inspect_task import themisto

    script = Script(case.script, lambda: kill_env_kernels(sample.id))

    def reply(messages: list[Any], tools: list[Any], tool_choice: Any, config: Any) -> ModelOutput:
        tool = script.next_tool() if tools else None
        if tool is not None:
            output = ModelOutput.for_tool_call("mockllm/model", tool, {})
        else:
            output = ModelOutput.from_content("mockllm/model", fenced(case.prediction))
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    task = themisto(tool_cost=TOOL_COST, execution_score=case.execution)
    model = get_model("mockllm/model", custom_outputs=reply)
    [log] = inspect_eval(task, model=model, sample_id=sample.id, log_dir=str(tmp_path / "inspect"), display="none")
    assert log.samples is not None
    [done] = log.samples
    if done.error is not None:  # an unscored sample is an error in the log, never a wrong answer
        message = done.error.message
        return Outcome(None, "InfrastructureError" in message or "infrastructure" in message.lower())
    scored = done.scores["themisto_scorer"]  # type: ignore[index]
    assert scored.metadata is not None
    assert scored.value["reward"] == scored.metadata["reward"]  # type: ignore[index]
    return of_score(scored.metadata)


def through_runner(sample: Sample, case: Case, out: Path, *, attempts: int = 1) -> list[dict[str, Any]]:
    ids = out.parent / f"{out.name}-sample-ids.txt"
    ids.write_text(sample.id + "\n", encoding="utf-8")
    config = RunConfig(
        agent="tests.test_one_score:ScriptedAgent",
        agent_options={"prediction": case.prediction, "script": list(case.script)},
        observation="tools",
        sample_ids=str(ids),
        attempts=attempts,
        env={key: value for key, value in env_options(case.execution).items() if key != "task"},
    )
    run(config, out, progress=False)
    [row] = read_results(out)
    assert row.sample_id == sample.id
    return [row.to_dict()]


# -- the proof ----------------------------------------------------------------------------------------------


#: The cases; one with a tool call or the execution score does a kernel's work on every path: marked slow.
CASE_PARAMS = [pytest.param(case, marks=pytest.mark.slow) if case.script or case.execution else case for case in CASES]


@pytest.mark.parametrize("case", CASE_PARAMS, ids=case_id)
def test_every_path_gives_the_same_reward_and_flags(
    case: Case,
    sample: Sample,
    gym_envs: dict[bool, ThemistoEnv],
    shared_states: dict[bool, SharedStates],
    tmp_path: Path,
) -> None:
    def killing(path: str, outcome: Callable[[], T]) -> T:
        """The path's outcome, once its kill step (if the case has one) really killed a kernel."""
        before = len(KILLED)
        result = outcome()
        assert KILL not in case.script or len(KILLED) > before, f"{path}: the kill step killed no kernel"
        return result

    gym, info = killing("gym env", lambda: through_gym(gym_envs[case.execution], sample, case))
    outcomes = {
        "trl tool env": killing("trl tool env", lambda: through_tool_env(shared_states[case.execution], sample, case)),
        "inspect scorer": killing("inspect scorer", lambda: through_inspect(sample, case, tmp_path)),
        "runner row": of_score(killing("runner", lambda: through_runner(sample, case, tmp_path / "run"))[0]),
    }
    if case.tool_free:
        value = through_reward_function(sample, case)
        outcomes["trl reward function"] = Outcome(value, gym.infrastructure_error, gym.state_mismatch, None)
        gym_bare = Outcome(gym.reward, gym.infrastructure_error, gym.state_mismatch, None)
        assert outcomes["trl reward function"].same_as(gym_bare), (case, value, gym)
        del outcomes["trl reward function"]
    if outcomes["inspect scorer"].reward is None:  # inspect's log keeps only that the sample erred
        gym_inspect = Outcome(None, gym.infrastructure_error)
        assert outcomes.pop("inspect scorer").same_as(gym_inspect), (case, gym)
    for path, outcome in outcomes.items():
        assert outcome.same_as(gym), f"{path}: {outcome} but the gym env: {gym} ({case})"

    # The rule itself (README "Reward"), and what each case must show.
    tools = sum(1 for step in case.script if step != KILL)
    if KILL in case.script and case.script[-1] != KILL:
        assert gym.reward is None and gym.infrastructure_error, "a tool call met the dead kernel: unscored"
        return
    assert not gym.infrastructure_error and not gym.state_mismatch, "the kill touched nothing this sample needed"
    metric = reward(score(case.prediction, sample.target))
    expected = metric
    if case.execution:
        assert info["execution_score"] is not None
        expected = 0.5 * metric + 0.5 * info["execution_score"]
    assert gym.reward == pytest.approx(expected - TOOL_COST * tools)
    if case.prediction == CRASH and case.execution:
        assert gym.prediction_failed == "exit" and info["execution_score"] == 0.0, "the model's failure, scored 0"
    assert gym.reward == pytest.approx(
        score_sample(
            case.prediction,
            sample.target,
            task="next-cell",
            rule=ScoringRule(weights=RewardWeights(), tool_cost=TOOL_COST, execution_score=case.execution),
            tools_used=tools,
            execution=gym_envs[case.execution].episode.scorer.execution_run(sample),
        ).reward
    )


def test_the_step_info_carries_the_sample_score(gym_envs: dict[bool, ThemistoEnv], sample: Sample) -> None:
    _, info = through_gym(gym_envs[True], sample, Case(PARTIAL, ("list_variables",), True))
    assert set(SampleScore.model_fields) <= set(StepInfo.model_fields), "StepInfo documents every score field"
    for field in ("scores", "metric_reward", "execution_score", "execution", "passed", "tools_used", "reward"):
        assert field in info, field
    assert info["tools_used"] == 1 and info["tool_cost"] == pytest.approx(TOOL_COST)
    assert StepInfo.model_validate(info).model_dump() == info, "the info is StepInfo's dict form"


@pytest.mark.slow
def test_pass_at_k_draws_carry_the_same_rewards(
    gym_envs: dict[bool, ThemistoEnv], sample: Sample, tmp_path: Path
) -> None:
    gym, info = through_gym(gym_envs[True], sample, Case(PARTIAL, (), True))
    [row] = through_runner(sample, Case(PARTIAL, (), True), tmp_path, attempts=2)
    assert [d["reward"] for d in row["draws"]] == pytest.approx([gym.reward, gym.reward])
    assert [d["passed"] for d in row["draws"]] == [info["passed"], info["passed"]]
    assert row["reward"] == pytest.approx(gym.reward)
