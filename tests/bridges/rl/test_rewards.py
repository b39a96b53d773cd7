"""TRL reward functions: the env's metric values, both completion formats, and the execution score."""

from __future__ import annotations

import pytest

from themisto_env.bridges.rl import ExecutionReward, MetricReward
from themisto_env.bridges.rl.export import export_samples
from themisto_env.bridges.rl.rewards import completion_text
from themisto_env.metrics import score
from themisto_env.scoring.rule import RewardWeights, reward


def test_the_target_itself_earns_full_reward_in_every_format(env_dataset: dict[str, str]) -> None:
    rows = export_samples("next-cell", "static", **env_dataset)
    targets = [r["target"] for r in rows]
    tasks = [r["task"] for r in rows]
    plain = MetricReward(parse=False)(prompts=None, completions=targets, target=targets, task=tasks)
    assert plain == [1.0] * len(rows)
    fenced = [f"```python\n{t}\n```" for t in targets]
    chat = [[{"role": "assistant", "content": f}] for f in fenced]
    assert MetricReward()(completions=fenced, target=targets, task=tasks) == [1.0] * len(rows)
    assert MetricReward()(completions=chat, target=targets, task=tasks, completion_ids=None) == [1.0] * len(rows)


def test_values_are_the_env_metrics() -> None:
    completions = ["print(df.head())", "df.describe()", ""]
    targets = ["df.head()", "df.describe(include='all')", "x = 1"]
    weights = RewardWeights(exact_match=1.0, rouge_l=1.0, chrf=2.0)
    values = MetricReward(weights=weights, parse=False)(completions=completions, target=targets, task="next-cell")
    assert values == [reward(score(c, t), weights) for c, t in zip(completions, targets, strict=True)]
    chrf = MetricReward("chrf", parse=False)(completions=completions, target=targets)
    assert chrf == [score(c, t).chrf for c, t in zip(completions, targets, strict=True)]
    assert all(0.0 <= v <= 1.0 for v in values) and values[0] < 1.0


def test_completion_text_reads_trl_formats() -> None:
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "y"}]) == "y"
    parts = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "text", "text": "z"}]}]
    assert completion_text(parts) == "z"


def test_execution_reward_runs_the_prediction(env_dataset: dict[str, str]) -> None:
    rows = export_samples("next-cell", "static", **env_dataset)
    row = next(r for r in rows if r["target"].startswith("by_region"))
    with ExecutionReward(**env_dataset) as execution:
        values = execution(
            completions=[row["target"], "len(sales) * 1000", row["target"]],
            sample_id=[row["sample_id"]] * 3,
            task=["next-cell", "next-cell", "output"],
        )
    assert values[0] == pytest.approx(1.0)
    assert values[1] is not None and values[1] < 0.5
    assert values[2] is None  # the output task has no execution score
