"""Reward functions for TRL's ``reward_funcs``: the env's metrics, and the execution-based score.

[`MetricReward`][themisto_env.bridges.rl.MetricReward] scores a completion (a string or messages, read by
`completion_text`) against the row's ``target`` by the env's rule without tool calls or execution.
[`ExecutionReward`][themisto_env.bridges.rl.ExecutionReward] (next-cell only) runs the predicted cell from the
pre-target state in a disposable kernel and returns the same ``SampleScore.reward`` every other path gives;
it owns kernels, so close it when done. Use one of them, not both: the env's rule already weighs the metrics
and the execution score.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from themisto_env.errors import ConfigError, InfrastructureError
from themisto_env.scoring.execution import ExecutionScore, execution_scores
from themisto_env.scoring.rule import RewardWeights, ScoringRule
from themisto_env.scoring.score import score_sample

if TYPE_CHECKING:
    from themisto_env.data.samples import Sample

MetricName = Literal["reward", "exact_match", "rouge_l", "chrf"]


def completion_text(completion: Any) -> str:
    """The text of a completion in TRL's standard (string) or conversational (messages) format.

    Args:
        completion: A string; a message dict with ``content``; or a list of messages, of which the
            assistant's (the last one if none is marked) is read. A content given as a list of parts
            (``{"type": "text", "text": ...}``) is joined.

    Returns:
        The completion's text.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        content = completion.get("content", "")
        if isinstance(content, str):
            return content
        return "".join(part.get("text", "") if isinstance(part, Mapping) else str(part) for part in content or [])
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        chosen = [m for m in messages if m.get("role") == "assistant"] or messages
        return "".join(completion_text(m) for m in chosen)
    raise ConfigError(f"a completion is a string or a list of messages, got {type(completion).__name__}")


def _per_row(value: Any, n: int, name: str) -> list[Any]:
    if value is None or isinstance(value, str):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ConfigError(f"reward: {len(values)} values of {name!r} for {n} completions")
    return values


def _executed(result: ExecutionScore | InfrastructureError | None, prediction: str) -> ExecutionScore | None:
    """An execution run (`ExecutionRun`) that gives a result computed with its group: a failure of the
    machinery raises, as a run of its own would."""
    if isinstance(result, InfrastructureError):
        raise result
    return result


class MetricReward:
    """Scores completions with the env's metrics (TRL ``reward_funcs`` signature).

    Args:
        metric: ``reward`` (``SampleScore.reward`` of the env's rule without tool calls and without the
            execution score; the default), or one of ``exact_match``, ``rouge_l``, ``chrf``.
        weights: Reward weights (the env's defaults when None).
        parse: Read the prediction out of the reply as the LLM agents do (fenced block, lead-in lines
            dropped); False scores the completion text as it is.
        task: The task when the dataset has no ``task`` column.
        split: Score only samples of this side of the dataset's split (``train``, ``test``, ``NAME:train``):
            each row's ``sample_id`` is checked, and a row of the other side raises
            [`SplitError`][themisto_env.errors.SplitError] (a trainer fed test rows stops, it is not paid).
            None: no check.
        dataset: The dataset the split is of (a folder or an open
            [`Dataset`][themisto_env.replay.Dataset]; None: the bundled data). Only with ``split``.

    Example:
        >>> MetricReward()(completions=["df.head()"], target=["df.head()"], task=["next-cell"])
        [1.0]
    """

    def __init__(
        self,
        metric: MetricName = "reward",
        weights: RewardWeights | None = None,
        *,
        parse: bool = True,
        task: str | None = None,
        split: str | None = None,
        dataset: Any = None,
    ) -> None:
        if metric not in ("reward", "exact_match", "rouge_l", "chrf"):
            raise ConfigError(f"metric must be reward, exact_match, rouge_l or chrf, got {metric!r}")
        self.metric = metric
        self.weights = weights or RewardWeights()
        self.rule = ScoringRule(weights=self.weights)  # no tool calls, no execution score
        self.parse = parse
        self.task = task
        self.split = split
        self._dataset = dataset
        self._served: Any = None  # the split's side, opened on first use
        self.__name__ = f"themisto_{metric}"  # TRL logs each reward function under its __name__

    def _check_split(self, sample_ids: Sequence[Any] | None, n: int) -> None:
        """Refuse rows of the other side of `split` (SplitError)."""
        if self.split is None:
            return
        if sample_ids is None:
            raise ConfigError(f"MetricReward(split={self.split!r}) needs the dataset's 'sample_id' column")
        if self._served is None:
            from themisto_env.replay.dataset import Dataset

            dataset = self._dataset
            whole = dataset if isinstance(dataset, Dataset) else Dataset.open(dataset)
            self._served = whole.view(self.split) if whole.split_label != self.split else whole
        for sid in _per_row(sample_ids, n, "sample_id"):
            self._served.check_served(sample_id=str(sid))

    def prediction(self, completion: Any, task: str | None) -> str:
        """The prediction a completion makes, as it is scored."""
        text = completion_text(completion)
        if not self.parse:
            return text
        from themisto_env.agents.parsing import extract_prediction

        return extract_prediction(text, task or "next-cell")  # type: ignore[arg-type]

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        target: Sequence[str] | None = None,
        task: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """One score per completion, in [0, 1].

        Args:
            prompts: The prompts (unused; TRL passes them).
            completions: The completions (strings or lists of messages).
            target: The reference text of each completion's sample (the dataset's ``target`` column).
            task: The task of each completion's sample (the ``task`` column), or one task for all.
            **kwargs: The other columns and TRL's extras (ignored).

        Raises:
            ConfigError: No targets (the dataset lacks a ``target`` column) or mismatched lengths.
        """
        completions = list(completions or [])
        if target is None:
            raise ConfigError("MetricReward needs the dataset's 'target' column (see themisto_env.bridges.rl.export)")
        targets = _per_row(target, len(completions), "target")
        tasks = _per_row(task if task is not None else self.task, len(completions), "task")
        self._check_split(kwargs.get("sample_id"), len(completions))
        values = []
        for completion, reference, row_task in zip(completions, targets, tasks, strict=True):
            scored = score_sample(
                self.prediction(completion, row_task),
                reference,
                task="output" if row_task == "output" else "next-cell",
                rule=self.rule,
            )
            value = scored.reward if self.metric == "reward" else scored.scores[self.metric]
            values.append(float(value or 0.0))  # a text-only score is never unscored (reward None)
        return values


class ExecutionReward:
    """Scores next-cell completions by running them in the sandbox (TRL ``reward_funcs`` signature).

    Each completion is scored by the env's `Scorer` with ``execution_score``
    on, as the env's prediction step scores a prediction made without tool calls, and its reward
    ([`SampleScore`][themisto_env.scoring.SampleScore]'s) is returned; with ``value="execution_score"`` the execution
    score alone: the mean of the Jaccard overlap of the variables the predicted and the real cell change and the chrF of
    their outputs (`themisto_env.scoring.execution`). Each completion runs in a disposable kernel of its
    own, so a batch scores exactly as its completions would alone: what one completion does (a thread, an
    option, a patched helper) never reaches another. The completions of one sample run as a group
    (`DisposableKernels.run_many`): copies of its state forked ahead, two at once;
    a run the machinery failed (its template killed by a sibling, say) runs again alone. A completion whose
    own code fails scores 0 on the execution score; output-task samples and unscored samples (the sandbox
    failed) get None (TRL skips them).

    Args:
        parse: Read the prediction out of the reply as the LLM agents do.
        value: ``reward`` (the env's reward; the default) or ``execution_score``.
        **env_options: [`EnvConfig`][themisto_env.env.EnvConfig] options for its scorer (``dataset``: a
            folder or an open [`Dataset`][themisto_env.replay.Dataset]; ``split``: score only that side, a
            row of the other side raises [`SplitError`][themisto_env.errors.SplitError]; ``backend``,
            ``snapshot_dir``, ``limits``, ``reward``, ...); use the same dataset as the exported rows.

    Attributes:
        config: The options scored under (task ``next-cell``, ``execution_score`` on).
        dataset: The dataset of the scored samples.
        scorer: The scorer (its disposable kernels start with the first completion).
    """

    def __init__(
        self, *, parse: bool = True, value: Literal["reward", "execution_score"] = "reward", **env_options: Any
    ) -> None:
        from themisto_env.env.config import env_config_and_dataset
        from themisto_env.env.scorer import Scorer

        if value not in ("reward", "execution_score"):
            raise ConfigError(f"value must be reward or execution_score, got {value!r}")
        self.value = value
        options = {**env_options, "task": "next-cell", "execution_score": True}
        self.config, self.dataset = env_config_and_dataset(options)
        self.scorer = Scorer(self.config, self.dataset)
        self.text = MetricReward(parse=parse)
        self.__name__ = "themisto_execution"
        self._samples = {s.id: s for s in self.dataset.samples(self.config.task, self.config.sample_rule)}

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        sample_id: Sequence[str] | None = None,
        task: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """One reward (or execution score) per completion, or None where it does not apply."""
        completions = list(completions or [])
        if sample_id is None:
            raise ConfigError("ExecutionReward needs the dataset's 'sample_id' column")
        ids = _per_row(sample_id, len(completions), "sample_id")
        tasks = _per_row(task if task is not None else "next-cell", len(completions), "task")
        values: list[float | None] = []
        for sid in ids:  # a split's side refuses the other side's rows, before any is scored
            self.dataset.check_served(sample_id=str(sid))
        groups: dict[str, list[int]] = {}  # the rows of each sample: its completions run as one group
        predictions: dict[int, str] = {}
        for index, (completion, sid, row_task) in enumerate(zip(completions, ids, tasks, strict=True)):
            if row_task == "next-cell" and sid in self._samples:
                groups.setdefault(sid, []).append(index)
                predictions[index] = self.text.prediction(completion, "next-cell")
        executed: dict[int, ExecutionScore | InfrastructureError | None] = {}
        for sid, rows in groups.items():
            executed.update(zip(rows, self._execute(self._samples[sid], [predictions[i] for i in rows]), strict=True))
        for index in range(len(completions)):
            if index not in predictions:
                values.append(None)
                continue
            sample = self._samples[str(ids[index])]
            scored = score_sample(
                predictions[index],
                sample.target,
                task=sample.task,
                rule=self.scorer.rule,
                execution=functools.partial(_executed, executed[index]),
            )
            value = getattr(scored, self.value)
            unscored = scored.reward is None  # an infrastructure failure
            values.append(None if value is None or unscored else float(value))
        return values

    def _execute(self, sample: Sample, predictions: list[str]) -> list[ExecutionScore | InfrastructureError | None]:
        """The execution scores of a group of predictions of one sample (`execution_scores`: copies of its
        state forked ahead, a few run at once, each scored as it would be alone)."""
        trajectory = self.dataset.trajectories[sample.trajectory_id]
        kernels, timeout_s = self.scorer.disposable_kernels(), self.scorer.code_timeout_s
        return execution_scores(kernels, trajectory, sample.step, predictions, timeout_s=timeout_s)

    def close(self) -> None:
        """Close the scorer's disposable kernels."""
        self.scorer.close()

    def __enter__(self) -> ExecutionReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
