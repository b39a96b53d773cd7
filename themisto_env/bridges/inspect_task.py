"""Themisto as an inspect_ai task: ``inspect eval themisto_env/themisto --model PROVIDER/MODEL``.

The parts, as inspect names them: the dataset (`themisto_dataset`: one inspect ``Sample`` per Themisto
sample, its input the messages our LLM agents send), the sandbox (`themisto_env.bridges.inspect_sandbox`),
the solver (`themisto_agent`: the observation tools, as our ``llm-tools`` agent uses them) and the scorer
(`themisto_scorer`: the env's one score, [`score_sample`][themisto_env.scoring.score_sample]). A state that
could not be served makes the sample an error in the log, never a wrong answer. Usage: docs/inspect.md
(``pip install 'themisto-env[inspect]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inspect_ai import Task, task
from inspect_ai._util.error import PrerequisiteError  # inspect's "print the message, not a traceback"
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.tool import Tool, ToolDef, ToolError, ToolParams
from inspect_ai.util import JSONSchema, SandboxEnvironmentSpec, sandbox
from pydantic import ValidationError

from themisto_env.agents.parsing import extract_prediction
from themisto_env.agents.prompting import PromptTemplates, load_prompts
from themisto_env.bridges.inspect_sandbox import SANDBOX_TYPE, SandboxConfig, ThemistoSandbox
from themisto_env.data.samples import TaskName, read_sample_ids, select_samples, selection_order
from themisto_env.env.config import EnvConfig, ObservationMode
from themisto_env.env.observation import sample_observation
from themisto_env.env.tools import TOOLS, ObservationTool
from themisto_env.errors import ConfigError, InfrastructureError, ThemistoError, options_error
from themisto_env.metrics import METRICS
from themisto_env.replay.dataset import Dataset
from themisto_env.scoring.rule import RewardWeights
from themisto_env.scoring.score import SampleScore

# -- the dataset ------------------------------------------------------------------------------------------


def prompt_messages(
    observation: dict[str, Any], config: EnvConfig, prompts: PromptTemplates
) -> list[ChatMessageSystem | ChatMessageUser]:
    """The system and user messages our LLM agents send for an observation."""
    mode = config.observation
    if mode == "tools" and config.tool_budget == 0:
        mode = "static"
    return [
        ChatMessageSystem(content=prompts.system_text(config.task)),
        ChatMessageUser(content=prompts.user_text(observation, config.task, mode)),
    ]


def themisto_dataset(
    config: EnvConfig,
    prompts: PromptTemplates | None = None,
    *,
    limit: int | None = None,
    seed: int = 0,
    sample_ids: Sequence[str] | None = None,
) -> MemoryDataset:
    """A task's samples as inspect samples (listed by the [`Dataset`][themisto_env.replay.Dataset] of
    ``config.dataset``; no env, no kernel): ``limit`` of them (all without) chosen as ``themisto run``
    chooses (`select_samples`), in the selection's order
    (`selection_order`), so that inspect's own ``--limit N`` takes the
    samples of ``themisto run --limit N``."""
    prompts = prompts or load_prompts()
    dataset = Dataset.open(config.dataset, backend=config.backend, split=config.split)
    chosen = select_samples(dataset.samples(config.task, config.sample_rule), limit, seed=seed, sample_ids=sample_ids)
    samples = []
    for sample in selection_order(chosen, seed=seed):
        trajectory_id, index = dataset.episode_position(sample.id, config.sample_rule)
        # before any tool call: ``runtime`` is empty (the solver fills it from the live kernel in ``full`` mode)
        observation = sample_observation(
            config, dataset.trajectories[trajectory_id], sample.step, tools_left=config.tool_budget
        )
        samples.append(
            Sample(
                id=sample.id,
                input=list(prompt_messages(observation, config, prompts)),
                target=sample.target,
                metadata={
                    "sample_id": sample.id,
                    "trajectory_id": trajectory_id,
                    "step": sample.step,
                    "sample_index": index,
                    "task": config.task,
                },
            )
        )
    return MemoryDataset(samples, name=f"themisto-{config.task}", location=str(dataset.path))


# -- the tools and the solver -----------------------------------------------------------------------------


def _parameters(tool: ObservationTool) -> ToolParams:
    """An observation tool's arguments as inspect's JSON schema (the keys inspect's schema knows)."""
    schema = tool.args_model.model_json_schema()
    known = set(JSONSchema.model_fields)
    properties = {
        name: JSONSchema.model_validate({k: v for k, v in field.items() if k in known})
        for name, field in schema.get("properties", {}).items()
    }
    return ToolParams(properties=properties, required=list(schema.get("required", [])))


def _observation_tool(tool: ObservationTool) -> Tool:
    async def execute(**arguments: Any) -> str:
        answer = await sandbox().as_type(ThemistoSandbox).call_tool(tool.name, arguments)
        if not answer.ok:
            raise ToolError(answer.text)
        return answer.text

    return ToolDef(execute, name=tool.name, description=tool.description, parameters=_parameters(tool)).as_tool()


def observation_tools(names: tuple[str, ...] | None = None) -> list[Tool]:
    """The observation tools (all, or those named) as inspect tools, run in the sample's sandbox."""
    return [_observation_tool(tool) for name, tool in TOOLS.items() if names is None or name in names]


@solver
def themisto_agent(max_model_calls: int | None = None) -> Solver:
    """Our tool-using agent's loop: tools while the budget lasts, then an answer.

    Args:
        max_model_calls: Model calls per sample (default: the tool budget plus 2).
    """
    prompts = load_prompts()

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        box = sandbox().as_type(ThemistoSandbox)
        config = box.episode.config
        if config.observation == "full":  # the runtime dump comes from the live kernel
            state.messages[1:2] = prompt_messages(box.observation, config, prompts)[1:]
        tools_left = box.tools_left if box.tool_names else 0
        state.tools = observation_tools(box.tool_names) if tools_left > 0 else []
        limit = max_model_calls if max_model_calls is not None else tools_left + 2
        for call in range(limit):
            if state.tools and box.tools_left <= 0:
                state.tools = []
                state.messages.append(ChatMessageUser(content=prompts.budget_spent))
            state = await generate(state, tool_calls="single")
            if not state.output.message.tool_calls or call + 1 == limit or state.completed:
                break
        return state

    return solve


# -- the scorer -------------------------------------------------------------------------------------------


#: What `themisto_scorer` reports per sample, each with its mean and stderr.
SCORER_VALUES = (*METRICS, "reward")


def _sample_score(scored: SampleScore, sample_id: str) -> SampleScore:
    """The score, or the error that makes an unscored sample an error in the log (retry with
    ``--retry-on-error``), never a wrong answer."""
    if scored.infrastructure_error:
        raise InfrastructureError(f"{sample_id}: {scored.infrastructure_error}")
    if scored.state_mismatch:
        raise InfrastructureError(f"{sample_id}: the served state differs from the recording: {scored.state_mismatch}")
    return scored


@scorer(metrics={name: [mean(), stderr()] for name in SCORER_VALUES})
def themisto_scorer() -> Scorer:
    """The env's score of the reply's prediction
    ([`themisto_env.scoring.score.score_sample`][themisto_env.scoring.score_sample], the one rule of docs/reward.md):
    exact match, ROUGE-L F1, chrF and the ``reward`` (with the execution score when the task has it on, minus
    ``tool_cost`` per tool call); every field of the [`SampleScore`][themisto_env.scoring.SampleScore] in the
    metadata."""

    async def score(state: TaskState, target: Target) -> Score:
        task: TaskName = state.metadata["task"]
        prediction = extract_prediction(state.output.completion, task)
        box = sandbox().as_type(ThemistoSandbox)
        scored = _sample_score(await box.score(prediction), state.metadata["sample_id"])
        report = box.episode.state_report
        metadata: dict[str, Any] = {**scored.model_dump(), "tool_calls": scored.tools_used}
        if report is not None:
            metadata["state"] = report.as_dict()
        value = {name: scored.scores[name] for name in METRICS}
        value["reward"] = scored.reward  # type: ignore[assignment]  # not None: unscored samples raise
        return Score(value=value, answer=prediction, metadata=metadata)

    return score


@scorer(metrics=[mean(), stderr()])
def themisto_execution_scorer() -> Scorer:
    """The execution score of a next-cell prediction (`themisto_env.scoring.execution`): run in a disposable
    kernel in the sample's state, its effects compared with the recorded ones; 0 when its own code
    failed (the reason in the metadata). The same [`SampleScore`][themisto_env.scoring.SampleScore] as
    `themisto_scorer`'s (the prediction runs once)."""

    async def score(state: TaskState, target: Target) -> Score:
        prediction = extract_prediction(state.output.completion, state.metadata["task"])
        box = sandbox().as_type(ThemistoSandbox)
        if not box.episode.config.execution_score:
            raise ConfigError("themisto_execution_scorer needs the task's execution_score option on")
        scored = _sample_score(await box.score(prediction), state.metadata["sample_id"])
        if scored.execution is None:
            raise ConfigError(
                "the dataset records no effects to score executions by; rebuild it with themisto data build"
            )
        metadata = {k: scored.execution[k] for k in ("variables", "outputs", "passed")}
        if scored.prediction_failed is not None:
            metadata["prediction_failed"] = scored.prediction_failed
        return Score(value=scored.execution_score, answer=prediction, metadata=metadata)

    return score


# -- the task ---------------------------------------------------------------------------------------------


@task
def themisto(
    task: TaskName = "next-cell",
    observation: ObservationMode = "tools",
    data: str | None = None,
    backend: str = "local",
    tool_budget: int = 5,
    tool_cost: float = 0.01,
    reward: RewardWeights | None = None,
    history_length: int = 10,
    snapshot_dir: str | None = None,
    limit: int | None = None,
    execution_score: bool = False,
    selection_seed: int = 0,
    sample_ids: str | None = None,
    split: str | None = None,
) -> Task:
    """Predict the next cell (or a cell's output) of Jupyter development trajectories.

    Args:
        task: ``next-cell`` or ``output``.
        observation: ``tools`` (the model queries the kernel), ``static`` (history only) or ``full``
            (history and a dump of every variable).
        data: A built trajectory dataset folder (``themisto data build``); None: the bundled data.
        backend: Where the kernels run: ``local``, ``bwrap`` or ``docker``.
        tool_budget: Tool calls per sample.
        tool_cost: Subtracted from the reward per tool call.
        reward: The reward's weights (None: the env's defaults).
        history_length: Recent executions shown in the prompt.
        snapshot_dir: Where kernel snapshots are stored (None: the default cache).
        limit: At most this many samples, spread over the trajectories: the samples of ``themisto run
            --limit N`` (the dataset is in that selection's order, so inspect's own ``--limit N`` takes the
            same ones).
        execution_score: Also score each next-cell prediction by running it (use the docker backend
            for models you do not trust).
        selection_seed: The seed of the selection (``themisto run --selection-seed``).
        sample_ids: A file of the sample ids to run (``themisto run --sample-ids``).
        split: Only one side of the dataset's split (``-T split=test``; ``train``, ``NAME:test``), as
            ``themisto run --split``.

    Raises:
        PrerequisiteError: An option is invalid, or the data cannot be read: inspect prints the one line,
            with no traceback.
    """
    try:
        if execution_score and task != "next-cell":
            raise ConfigError("the execution score is for the next-cell task only")
        options = SandboxConfig(
            task=task,
            observation=observation,
            dataset=data,
            split=split,
            backend=backend,
            tool_budget=tool_budget,
            tool_cost=tool_cost,
            reward=reward or RewardWeights(),
            history_length=history_length,
            snapshot_dir=snapshot_dir,
            execution_score=execution_score,
        )
        ids = read_sample_ids(sample_ids) if sample_ids is not None else None
        dataset = themisto_dataset(options.env_config(), limit=limit, seed=selection_seed, sample_ids=ids)
    except ValidationError as exc:  # inspect prints a PrerequisiteError as its message, with no traceback
        raise PrerequisiteError(f"themisto task: {options_error(exc.errors(), EnvConfig, prefix='-T ')}") from None
    except ConfigError as exc:
        problems = options_error(exc.errors, EnvConfig, prefix="-T ") if exc.errors else " ".join(str(exc).split())
        raise PrerequisiteError(f"themisto task: {problems}") from None
    except ThemistoError as exc:
        raise PrerequisiteError(f"themisto task: {' '.join(str(exc).split())}") from None
    return Task(
        dataset=dataset,
        solver=themisto_agent(),
        scorer=[themisto_scorer(), themisto_execution_scorer()] if execution_score else themisto_scorer(),
        sandbox=SandboxEnvironmentSpec(SANDBOX_TYPE, options),
        name=f"themisto-{task}",
    )


__all__ = [
    "observation_tools",
    "prompt_messages",
    "themisto",
    "themisto_agent",
    "themisto_dataset",
    "themisto_execution_scorer",
    "themisto_scorer",
]
