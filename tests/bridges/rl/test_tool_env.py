"""TRL's multi-turn environment: tools answered from the sample's recorded state, shared by a GRPO group,
rewards from the env's metrics, and no reward where the machinery failed."""

from __future__ import annotations

import functools
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import kernels_under, wait_for
from themisto_env.bridges.rl.tool_env import ROLLOUT_TOOLS, SharedStates, ThemistoToolEnv, tool_dataset
from themisto_env.env.actions import Prediction
from themisto_env.env.core import ThemistoEnv
from themisto_env.env.record import SANDBOX_FAILED
from themisto_env.env.tools import ToolCall
from themisto_env.metrics import score
from themisto_env.scoring.rule import reward

#: Every observation tool a rollout can call, with arguments valid in the sales notebook's later states.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("list_variables", {}),
    ("inspect_variable", {"name": "sales"}),
    ("dataframe_head", {"name": "sales", "n": 3}),
    ("dataframe_info", {"name": "sales"}),
    ("memory_usage", {}),
    ("get_source", {"name": "total"}),
]


def call_all(rollout: ThemistoToolEnv) -> list[str]:
    return [getattr(rollout, tool)(**args) for tool, args in CALLS]


def eager_answers(env_dataset: dict[str, str], sample_id: str) -> tuple[list[str], Any]:
    """The same calls through an eager env's step API, and its kernel's namespace and fingerprint."""
    env = ThemistoEnv(task="next-cell", lazy_state=False, warm_kernels=0, tool_budget=100, **env_dataset)
    try:
        index = next(
            (t, i) for t, s in env.episode.episode_samples.items() for i, x in enumerate(s) if x.id == sample_id
        )
        env.reset(options={"trajectory": index[0], "sample": index[1]})
        answers = [env.step(ToolCall(tool=tool, args=args))[0]["tool_result"] for tool, args in CALLS]
        kernel = env.episode.tool_context().kernel
        return answers, (sorted(kernel.introspect.namespace_state().names), kernel.introspect.fingerprint())
    finally:
        env.close()


@pytest.fixture(scope="module")
def late_sample(env_dataset: dict[str, str]) -> str:
    """A sample after ``total`` and ``sales`` exist."""
    rows = tool_dataset("next-cell", **env_dataset)
    return str(rows[-2]["sample_id"])


def test_a_group_shares_one_kernel_that_no_rollout_alters(env_dataset: dict[str, str], late_sample: str) -> None:
    expected, expected_state = eager_answers(env_dataset, late_sample)
    # No answer cache: every rollout's calls reach the shared kernel.
    with SharedStates(task="next-cell", tool_budget=100, cache_answers=False, **env_dataset) as states:
        group = [ThemistoToolEnv(states) for _ in range(4)]
        for rollout in group:
            assert rollout.reset(sample_id=late_sample) is not None  # the submit instruction
        answers = [call_all(group[0])]
        kernel = states._owned[0].tool_context().kernel
        before = kernel.introspect.namespace_state()
        answers += [call_all(rollout) for rollout in group[1:]]  # one after the other, each every tool
        assert all(a == expected for a in answers), "a rollout saw another state than the recording's"
        assert len(states._owned) == 1, "one kernel for the group"
        assert kernel.introspect.namespace_state() == before, (
            "names, values' ids, _ and the execution counter untouched"
        )
        assert (sorted(before.names), kernel.introspect.fingerprint()) == expected_state


@pytest.mark.slow
def test_without_sharing_each_rollout_has_its_own_kernel(env_dataset: dict[str, str], late_sample: str) -> None:
    expected, _ = eager_answers(env_dataset, late_sample)
    with SharedStates(task="next-cell", share=False, tool_budget=100, **env_dataset) as states:
        group = [ThemistoToolEnv(states) for _ in range(3)]
        for rollout in group:
            rollout.reset(sample_id=late_sample)
        assert all(call_all(rollout) == expected for rollout in group)
        pids = {server.tool_context().kernel.launcher.pid() for server in states._owned}
        assert len(states._owned) == 3 and len(pids) == 3


@pytest.mark.slow
def test_more_samples_than_kernels_move_the_least_recently_used(env_dataset: dict[str, str]) -> None:
    rows = tool_dataset("next-cell", **env_dataset)
    chosen = [str(rows[i]["sample_id"]) for i in (-2, 2, -3, -2)]
    with SharedStates(task="next-cell", max_kernels=2, tool_budget=100, **env_dataset) as states:
        for sample_id in chosen:
            env = ThemistoEnv(task="next-cell", lazy_state=False, warm_kernels=0, **env_dataset)
            try:
                index = next(
                    (t, i) for t, s in env.episode.episode_samples.items() for i, x in enumerate(s) if x.id == sample_id
                )
                env.reset(options={"trajectory": index[0], "sample": index[1]})
                want = env.step(ToolCall(tool="list_variables"))[0]["tool_result"]
            finally:
                env.close()
            rollout = ThemistoToolEnv(states)
            rollout.reset(sample_id=sample_id)
            assert rollout.list_variables() == want, sample_id
        assert len(states._owned) == 2


def test_the_reward_is_the_env_metric_of_the_submitted_prediction(
    env_dataset: dict[str, str], late_sample: str
) -> None:
    with SharedStates(task="next-cell", tool_budget=2, tool_cost=0.05, **env_dataset) as states:
        target = states.samples[late_sample].target
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        assert rollout.get_reward() == reward(score("", target)), "nothing submitted: an empty prediction"
        rollout.list_variables()
        rollout.submit("print(total(sales))")
        rollout.submit(target)  # the last one counts
        assert rollout.get_reward() == pytest.approx(1.0 - 0.05)
        rollout.list_variables()
        assert "budget" in rollout.list_variables(), "the third call is over the budget"
        assert rollout.get_reward() == pytest.approx(1.0 - 0.1)
        rollout.reset(sample_id=late_sample)
        assert rollout.answer is None and rollout.tool_calls == []


def test_a_rollout_the_machinery_failed_gets_no_reward_and_the_next_one_is_served_again(
    env_dataset: dict[str, str], late_sample: str
) -> None:
    expected, _ = eager_answers(env_dataset, late_sample)
    with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as states:
        first, second = ThemistoToolEnv(states), ThemistoToolEnv(states)
        first.reset(sample_id=late_sample)
        second.reset(sample_id=late_sample)
        first.list_variables()
        os.kill(states._owned[0].tool_context().kernel.launcher.pid(), signal.SIGKILL)
        assert "sandbox failed" in first.memory_usage()  # not asked before: it reaches the dead kernel
        first.submit(states.samples[late_sample].target)
        assert first.get_reward() is None, "an infrastructure failure is never scored"
        assert call_all(second) == expected, "recovered: the same recorded state"
        second.submit(states.samples[late_sample].target)
        assert second.get_reward() == pytest.approx(1.0 - 0.01 * len(CALLS))


def test_trl_reads_the_tools_schemas(env_dataset: dict[str, str]) -> None:
    """TRL builds each tool's schema from its type hints and docstring (transformers' get_json_schema)."""
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    with SharedStates(task="next-cell", **env_dataset) as states:
        rollout = states.factory()()
        names = {}
        for tool in ROLLOUT_TOOLS:
            schema = get_json_schema(getattr(rollout, tool.name))["function"]
            names[schema["name"]] = set(schema["parameters"].get("properties", {}))
        assert names["dataframe_head"] == {"name", "n"} and names["submit"] == {"prediction"}
        assert names["list_variables"] == set()


def test_predictions_never_reach_the_shared_kernel(env_dataset: dict[str, str], late_sample: str) -> None:
    """Under the execution score a submitted prediction runs in a disposable kernel only."""
    with SharedStates(task="next-cell", execution_score=True, tool_budget=100, **env_dataset) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        before = rollout.list_variables()
        rollout.submit("hacked = 1\nsales.drop(columns=['units'], inplace=True)")
        value = rollout.get_reward()
        assert value is not None and value < 0.5
        other = ThemistoToolEnv(states)
        other.reset(sample_id=late_sample)
        assert other.list_variables() == before and "hacked" not in before
        assert "hacked" not in states._owned[0].tool_context().kernel.introspect.namespace_state().names


def test_a_groups_repeated_calls_are_answered_once_and_the_same(env_dataset: dict[str, str], late_sample: str) -> None:
    expected, _ = eager_answers(env_dataset, late_sample)
    with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as states:
        group = [ThemistoToolEnv(states) for _ in range(3)]
        for rollout in group:
            rollout.reset(sample_id=late_sample)
        assert call_all(group[0]) == expected
        kernel = states._owned[0].kernel_owner.kernel
        os.kill(kernel.launcher.pid(), signal.SIGKILL)  # a call that reached the kernel now would fail
        assert all(call_all(rollout) == expected for rollout in group[1:]), "answered from the group's first calls"
        assert all(rollout.faults == [] for rollout in group)
        assert all(len(rollout.tool_calls) == len(CALLS) for rollout in group), "each rollout pays for its calls"


def test_rollouts_of_two_samples_call_their_kernels_at_once(env_dataset: dict[str, str]) -> None:
    """A slow call on one sample's kernel (a tried cell that sleeps) does not hold up a call on another's: the
    verifiers tool server runs its rollouts in threads."""
    rows = tool_dataset("next-cell", **env_dataset)
    slow_sample, quick_sample = str(rows[-2]["sample_id"]), str(rows[2]["sample_id"])
    with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as states:
        slow, quick = ThemistoToolEnv(states), ThemistoToolEnv(states)
        slow.reset(sample_id=slow_sample)
        quick.reset(sample_id=quick_sample)
        slow.list_variables()  # both kernels served before the race
        quick.list_variables()
        copies = states.scorer().disposable_kernels()
        sleeps = "import time; time.sleep(6); print('woke')"
        tried = threading.Thread(target=slow._call, args=("try_cell", {"code": sleeps}))
        tried.start()
        deadline = time.monotonic() + 120
        while copies.running is None and tried.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert copies.running is not None, "the tried cell never started"
        answered = quick.memory_usage()  # not cached: it has to reach the quick sample's kernel
        still_sleeping = tried.is_alive()
        tried.join(timeout=120)
        assert answered and still_sleeping, "the quick call waited for the other sample's tried cell"
        assert "woke" in slow.episode.tool_text, slow.episode.tool_text  # the tried cell ran to its end
        assert quick.faults == slow.faults == []


def test_rollouts_in_threads_moving_one_kernel_between_samples_get_each_samples_answers(
    env_dataset: dict[str, str],
) -> None:
    """One kernel for two samples, rollouts of both calling from threads at once: each answer is its own
    sample's (the answer cache never hands one sample's answer to the other)."""
    rows = tool_dataset("next-cell", **env_dataset)
    samples = [str(rows[-2]["sample_id"]), str(rows[2]["sample_id"])]
    want = {}
    for sample_id in samples:
        with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as alone:
            rollout = ThemistoToolEnv(alone)
            rollout.reset(sample_id=sample_id)
            want[sample_id] = (rollout.list_variables(), rollout.dataframe_info(name="sales"))
    assert want[samples[0]] != want[samples[1]]
    with SharedStates(task="next-cell", tool_budget=100, max_kernels=1, **env_dataset) as states:
        seen: dict[str, list[tuple[str, str]]] = {s: [] for s in samples}

        def rollouts(sample_id: str) -> None:
            for _ in range(3):
                rollout = ThemistoToolEnv(states)
                rollout.reset(sample_id=sample_id)
                seen[sample_id].append((rollout.list_variables(), rollout.dataframe_info(name="sales")))

        threads = [threading.Thread(target=rollouts, args=(s,)) for s in samples]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert len(states._owned) == 1
    for sample_id in samples:
        assert seen[sample_id] == [want[sample_id]] * 3, sample_id


#: The two samples of the concurrent runs below: tool_dataset's rows (``early``: before ``total`` exists).
TWO_SAMPLES = {"early": 2, "late": -2}
OTHER = {"early": "late", "late": "early"}
ROUNDS = 3


def kernel_processes() -> set[int]:
    """The live kernels and state templates this test process started."""
    return {process.pid for process in kernels_under(os.getpid(), state_templates=True)}


def run_folders() -> set[Path]:
    """The kernels' run folders in the temporary folder: each kernel's, a forked copy's (in its template's
    ``kernels``) and each state template's."""
    root = Path(tempfile.gettempdir())
    patterns = ("themisto-kernel-*", "themisto-kernel-*/kernels/*", "themisto-kernel-*/state-*")
    return {path for pattern in patterns for path in root.glob(pattern)}


def rendezvous(folder: Path, mine: str, other: str) -> str:
    """Code that marks ``mine`` in ``folder`` and waits (30 s at most) for ``other``'s mark, creating no name:
    it raises unless the other code ran meanwhile (or had run: its mark left in ``folder``)."""
    path = "__import__('pathlib').Path"
    wait = f"{path}({str(folder / other)!r}).exists() or __import__('time').sleep(0.05)"
    return f"{path}({str(folder / mine)!r}).touch()\nassert any({wait} for _ in range(600)), 'ran alone'\n"


def marked_for_alone(folder: Path, rounds: int) -> None:
    """Every rendezvous mark in ``folder`` already: run alone, no code waits."""
    for tag in TWO_SAMPLES:
        for round_ in range(rounds):
            (folder / f"{tag}-{round_}").touch()


def unmark(folder: Path) -> None:
    for mark in folder.iterdir():
        mark.unlink()


def assert_nothing_left(kernels: set[int], folders: set[Path]) -> None:
    """No kernel, state template or run folder beyond those there before (``kernels``, ``folders``)."""
    assert wait_for(lambda: not kernel_processes() - kernels), f"kernels left: {kernel_processes() - kernels}"
    assert wait_for(lambda: not run_folders() - folders), f"run folders left: {run_folders() - folders}"


def run_in_threads(work: dict[str, Any]) -> dict[str, Any]:
    """Each of ``work``'s callables in a thread of its own, at once; their results (a thread's error raised)."""
    with ThreadPoolExecutor(max_workers=len(work)) as threads:
        futures = {key: threads.submit(call) for key, call in work.items()}
        return {key: future.result(timeout=600) for key, future in futures.items()}


@pytest.fixture
def two_samples(env_dataset: dict[str, str]) -> dict[str, str]:
    rows = tool_dataset("next-cell", **env_dataset)
    return {tag: str(rows[index]["sample_id"]) for tag, index in TWO_SAMPLES.items()}


def test_cells_tried_at_once_on_two_samples_answer_as_each_alone(
    env_dataset: dict[str, str], two_samples: dict[str, str], tmp_path: Path
) -> None:
    """The verifiers tool server runs its rollouts in threads, which share one scorer's disposable kernels: two
    rollouts on two samples trying cells at once (each cell reads its state, changes it and waits for the
    other's to run) each read what their cell did alone, in their own sample's state, and none of it stays."""

    def code(tag: str, round_: int) -> str:
        names = "sorted(n for n in globals() if not n.startswith('_') and n not in ('In', 'Out', 'exit', 'quit'))"
        return rendezvous(tmp_path, f"{tag}-{round_}", f"{OTHER[tag]}-{round_}") + (
            f"seen_{tag}_{round_} = {names}\n"
            f"sales['{tag}_{round_}'] = sales['units'] * {round_ + 2}\n"
            f"print(sales.shape, seen_{tag}_{round_})"
        )

    marked_for_alone(tmp_path, ROUNDS)
    want: dict[str, list[str]] = {}
    variables: dict[str, str] = {}
    for tag, sample_id in two_samples.items():
        with SharedStates(task="next-cell", tool_budget=100, **env_dataset) as alone:
            rollout = ThemistoToolEnv(alone)
            rollout.reset(sample_id=sample_id)
            variables[tag] = rollout.list_variables()
            want[tag] = [rollout._call("try_cell", {"code": code(tag, r)}) for r in range(ROUNDS)]
            assert rollout.faults == []
    for tag, answers in want.items():
        for round_, answer in enumerate(answers):
            assert "status: ok" in answer and f"seen_{tag}_{round_}" in answer, answer
            assert "(20, 3)" in answer, "each cell runs in a fresh copy: the column of the round before is gone"
    assert "'total'" in want["late"][0] and "'total'" not in want["early"][0], "two different states"
    unmark(tmp_path)

    kernels, folders = kernel_processes(), run_folders()
    barrier = threading.Barrier(len(two_samples), timeout=300)
    with SharedStates(task="next-cell", tool_budget=100, cache_answers=False, **env_dataset) as states:
        rollouts = {tag: ThemistoToolEnv(states) for tag in two_samples}

        def tries(tag: str) -> list[str]:
            rollouts[tag].reset(sample_id=two_samples[tag])
            rollouts[tag].list_variables()  # the sample's state served before the race
            answers = []
            for round_ in range(ROUNDS):
                barrier.wait()
                answers.append(rollouts[tag]._call("try_cell", {"code": code(tag, round_)}))
            return answers

        got = run_in_threads({tag: functools.partial(tries, tag) for tag in two_samples})
        assert {p.name for p in tmp_path.iterdir()} == {f"{t}-{r}" for t in two_samples for r in range(ROUNDS)}
        for tag, rollout in rollouts.items():
            assert rollout.faults == [] and rollout.untrusted == [], "no run is the machinery's fault"
            assert rollout.list_variables() == variables[tag], "the shared kernel never ran a tried cell"
            fresh = ThemistoToolEnv(states)
            fresh.reset(sample_id=two_samples[tag])
            assert fresh.list_variables() == variables[tag]
    for tag in two_samples:
        assert got[tag] == want[tag], f"{tag}: a cell tried beside another's answered otherwise than alone"
        for round_, answer in enumerate(got[tag]):
            foreign = [f"{t}_{r}" for t in two_samples for r in range(ROUNDS) if (t, r) != (tag, round_)]
            assert not [name for name in foreign if name in answer], answer
    assert_nothing_left(kernels, folders)


def test_predictions_scored_at_once_on_two_samples_get_each_their_reward_alone(
    env_dataset: dict[str, str], two_samples: dict[str, str], tmp_path: Path
) -> None:
    """Under the execution score, two rollouts on two samples asking their rewards at once (their predictions
    run at once, each waiting for the other's) get the rewards they get alone, and leave nothing behind."""

    def predictions(tag: str, target: str) -> list[str]:
        wrong = f"hacked_{tag} = 1\nsales.drop(columns=['units'], inplace=True)"
        return [rendezvous(tmp_path, f"{tag}-{r}", f"{OTHER[tag]}-{r}") + p for r, p in enumerate((target, wrong))]

    options: dict[str, Any] = {"task": "next-cell", "execution_score": True, "tool_budget": 100, **env_dataset}
    marked_for_alone(tmp_path, 2)
    want: dict[str, list[Any]] = {}
    variables: dict[str, str] = {}
    for tag, sample_id in two_samples.items():
        with SharedStates(**options) as alone:
            rollout = ThemistoToolEnv(alone)
            rollout.reset(sample_id=sample_id)
            variables[tag] = rollout.list_variables()
            want[tag] = []
            for prediction in predictions(tag, alone.samples[sample_id].target):
                rollout.submit(prediction)
                want[tag].append((rollout.get_reward(), rollout.last_score))
    for tag, ((right, _), (wrong, _)) in want.items():
        assert right is not None and wrong is not None and right > wrong, (tag, right, wrong)
    unmark(tmp_path)

    kernels, folders = kernel_processes(), run_folders()
    barrier = threading.Barrier(len(two_samples), timeout=300)
    with SharedStates(**options, cache_answers=False) as states:
        rollouts = {tag: ThemistoToolEnv(states) for tag in two_samples}

        def rewards(tag: str) -> list[Any]:
            rollout = rollouts[tag]
            rollout.reset(sample_id=two_samples[tag])
            rollout.list_variables()
            got = []
            for prediction in predictions(tag, states.samples[two_samples[tag]].target):
                rollout.submit(prediction)
                barrier.wait()
                got.append((rollout.get_reward(), rollout.last_score))
            return got

        got = run_in_threads({tag: functools.partial(rewards, tag) for tag in two_samples})
        assert len(list(tmp_path.iterdir())) == 4, "every prediction ran"
        for tag, rollout in rollouts.items():
            assert rollout.faults == [] and rollout.untrusted == []
            fresh = ThemistoToolEnv(states)
            fresh.reset(sample_id=two_samples[tag])
            assert fresh.list_variables() == variables[tag], "a prediction reached the shared kernel"
    assert got == want, "a reward asked beside another's differs from the one asked alone"
    assert_nothing_left(kernels, folders)


def gym_tool_steps(env_dataset: dict[str, str], sample_id: str, budget: int, calls: int) -> list[dict[str, Any]]:
    """The infos of ``calls`` tool calls and a prediction of the target through the gym env."""
    env = ThemistoEnv(task="next-cell", tool_budget=budget, tool_cost=0.05, **env_dataset)
    try:
        target = next(s.target for s in env.episode.samples if s.id == sample_id)
        env.reset(options={"sample": sample_id})
        infos = [env.step(ToolCall(tool="list_variables"))[4] for _ in range(calls)]
        return [*infos, env.step(Prediction(text=target))[4]]
    finally:
        env.close()


def test_a_call_past_the_budget_is_refused_as_in_the_gym_env(env_dataset: dict[str, str], late_sample: str) -> None:
    """The rollout's budget is the env's record: a call past it runs nothing and costs nothing."""
    *tool_infos, scored = gym_tool_steps(env_dataset, late_sample, budget=2, calls=3)
    assert [bool(i.get("tool_refused")) for i in tool_infos] == [False, False, True]
    with SharedStates(task="next-cell", tool_budget=2, tool_cost=0.05, cache_answers=False, **env_dataset) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        answers = [rollout.list_variables() for _ in range(3)]
        assert "budget" in answers[2] and answers[0] == answers[1] != answers[2]
        assert rollout.record.tools_used == 2 and rollout.record.tools_left == 0
        assert len(rollout.tool_calls) == 2, "the refused call did not run"
        rollout.submit(states.samples[late_sample].target)
        assert rollout.get_reward() == pytest.approx(scored["reward"]) == pytest.approx(1.0 - 2 * 0.05)


def test_a_call_the_sandbox_failed_is_given_back_as_in_the_gym_env(
    env_dataset: dict[str, str], late_sample: str
) -> None:
    with SharedStates(task="next-cell", tool_budget=2, **env_dataset) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        rollout.list_variables()
        os.kill(states.server_for(late_sample).tool_context().kernel.launcher.pid(), signal.SIGKILL)
        assert "sandbox failed" in rollout.memory_usage()
        assert rollout.record.tools_used == 1 and len(rollout.faults) == 1, "given back: not the agent's fault"
        assert "recovered" in rollout.faults[0]
        assert "sales" in rollout.inspect_variable("sales"), "the state was served again"
        assert "budget" in rollout.get_source("total"), "two calls counted: the budget is spent"
        assert rollout.get_reward() is None and rollout.untrusted == rollout.faults


def _counts(record: Any) -> tuple[int, float, list[dict[str, Any]], int]:
    return record.tools_used, round(record.tool_cost_paid, 9), record.tool_calls, len(record.faults)


@pytest.mark.slow  # two kernels killed and recovered
def test_the_rollouts_turns_are_the_envs_turns(env_dataset: dict[str, str], late_sample: str) -> None:
    """The same calls, a kill of the kernel between them, and a call past the budget: the TRL rollout reads
    the gym env's texts (its refusal, its sandbox-failed answer, the tools' answers) and its record counts,
    pays and gives back what the gym env's record does."""
    calls = [
        ("list_variables", {}),
        "kill",
        ("memory_usage", {}),
        ("inspect_variable", {"name": "sales"}),
        ("get_source", {"name": "total"}),
    ]
    env = ThemistoEnv(task="next-cell", tool_budget=2, tool_cost=0.05, **env_dataset)
    try:
        env.reset(options={"sample": late_sample})
        gym = []
        for call in calls:
            if call == "kill":
                os.kill(env.episode.tool_context().kernel.launcher.pid(), signal.SIGKILL)
                continue
            obs, reward, *_ = env.step(ToolCall(tool=call[0], args=call[1]))
            gym.append((obs["tool_result"], reward))
        gym_record = _counts(env.episode.record.current)
    finally:
        env.close()
    with SharedStates(task="next-cell", tool_budget=2, tool_cost=0.05, cache_answers=False, **env_dataset) as states:
        rollout = ThemistoToolEnv(states)
        rollout.reset(sample_id=late_sample)
        answers = []
        for call in calls:
            if call == "kill":
                os.kill(states.server_for(late_sample).tool_context().kernel.launcher.pid(), signal.SIGKILL)
                continue
            answers.append(getattr(rollout, call[0])(**call[1]))
        rollout_record = _counts(rollout.record)
    texts = [text for text, _ in gym]
    assert texts[1] == SANDBOX_FAILED and texts[3] == rollout.record.refusal(), texts
    assert answers == texts, "the rollout reads the gym env's texts"
    assert [reward for _, reward in gym] == [-0.05, -0.05, -0.05, 0.0]
    assert rollout_record == gym_record, "counted, paid and given back alike"
    assert rollout_record[0] == 2 and rollout_record[3] == 1  # two counted calls; the failed one given back
