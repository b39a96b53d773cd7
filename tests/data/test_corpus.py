"""The per-notebook table (issue 43): its rows are the sample rule's counts per trajectory, summed per notebook,
the total is their sum, and the largest drop causes are named in order."""

from __future__ import annotations

from collections import Counter
from typing import Any

from themisto_env.data.corpus import EMPTY, SHORT, TOO_LONG, TOTAL, corpus_table, notebook_of
from themisto_env.data.samples import TASKS, SampleRule, sample_counts, sample_counts_by_trajectory
from themisto_env.data.trajectory import Step, Trajectory


def _stdout(text: str) -> list[dict[str, Any]]:
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def _step(index: int, printed: str, kind: str = "ok") -> Step:
    return Step(
        index=index,
        source=f"print({printed!r})" if printed else f"x{index} = {index}",
        status="ok",
        outputs=_stdout(printed) if printed else [],
        duration_s=0.01,
        agrees=kind == "ok",
        agreement_kind=kind,
    )


def _trajectory(tid: str, notebook: str | None, steps: list[Step], source: str | None = None) -> Trajectory:
    return Trajectory(
        id=tid,
        session_key=tid,
        notebook_name=notebook,
        source_path=source,
        source_digest=tid,
        backend="local",
        steps=steps,
    )


def _dataset() -> list[Trajectory]:
    """Two sessions of one notebook, one of another, a short one, and one with no notebook name."""
    long_output = "y" * 5000  # over the 0.99 quantile of output length: too long
    a_disagreeing = [_step(2, "2\n", "missing-file"), _step(3, "3\n", "missing-file"), _step(4, "4\n", "upstream")]
    return [
        _trajectory("a1", "a.ipynb", [_step(0, "1\n"), _step(1, ""), *a_disagreeing, _step(5, "5\n")]),
        _trajectory("b1", "b.ipynb", [_step(i, f"{i}\n", "nondeterminism" if i % 2 else "ok") for i in range(7)]),
        _trajectory("a2", "a.ipynb", [_step(i, f"{i}\n") for i in range(5)] + [_step(5, long_output)]),
        _trajectory("s1", "short.ipynb", [_step(0, "0\n"), _step(1, "1\n")]),
        _trajectory("n1", None, [_step(i, f"{i}\n", "missing-module") for i in range(5)], source="/x/y/log.jsonl"),
    ]


def test_rows_are_the_rules_counts_per_trajectory_summed_per_notebook() -> None:
    trajectories = _dataset()
    table = corpus_table(trajectories)
    assert [r.notebook for r in table.rows] == ["a.ipynb", "b.ipynb", "short.ipynb", "log.jsonl"]
    by_id = {t.id: t for t in trajectories}
    for task in TASKS:
        counts = sample_counts_by_trajectory(trajectories, task)
        for row in table.rows:
            members = [tid for tid, t in by_id.items() if notebook_of(t) == row.notebook]
            assert row.trajectories == len(members)
            assert row.executions == sum(len(by_id[tid].steps) for tid in members)
            assert row.kept[task] == sum(counts[tid].kept for tid in members)
            causes: Counter[str] = Counter()
            for tid in members:
                c = counts[tid]
                causes.update({**c.by_cause, SHORT: c.short, EMPTY: c.empty, TOO_LONG: c.too_long})
            assert row.dropped[task] == dict(+causes), (task, row.notebook)


def test_the_total_is_the_sum_and_the_whole_datasets_counts() -> None:
    trajectories = _dataset()
    table = corpus_table(trajectories)
    total = table.total
    assert total.notebook == TOTAL
    assert total.trajectories == len(trajectories) == sum(r.trajectories for r in table.rows)
    assert total.executions == sum(len(t.steps) for t in trajectories)
    for task in TASKS:
        whole = sample_counts(trajectories, task)
        assert total.kept[task] == whole.kept == sum(r.kept[task] for r in table.rows)
        summed: Counter[str] = Counter()
        for row in table.rows:
            summed.update(row.dropped[task])
        assert total.dropped[task] == dict(summed)
        assert total.dropped_total(task) == whole.candidates - whole.kept + whole.short
        assert total.dropped[task] == dict(
            +Counter({**whole.by_cause, SHORT: whole.short, EMPTY: whole.empty, TOO_LONG: whole.too_long})
        )


def test_the_largest_causes_are_named_largest_first() -> None:
    table = corpus_table(_dataset())
    a, b, short, log = table.rows
    assert a.top_causes("output") == [("missing-file", 2), ("empty", 1), ("too-long", 1)]
    assert b.top_causes("output") == [("nondeterminism", 3)]
    assert short.top_causes("output") == [(SHORT, 2)] and short.top_causes("next-cell") == [(SHORT, 1)]
    assert log.top_causes("output") == [("missing-module", 5)]
    assert log.top_causes("next-cell") == []  # next-cell samples are kept whatever the cause
    assert table.total.top_causes("output") == [("missing-module", 5), ("nondeterminism", 3), ("missing-file", 2)]
    assert table.most_dropped(2) == [a, log]  # 6 drops (one of them next-cell: too long), then 5
    row = table.to_json()["notebooks"][0]
    assert row["top_causes"]["output"] == [["missing-file", 2], ["empty", 1], ["too-long", 1]]
    assert row["kept"] == a.kept and row["dropped"]["output"] == a.dropped["output"]


def test_another_rule_gives_other_rows() -> None:
    rule = SampleRule(min_executions=1, follow_recording=False, max_length_quantile=None)
    table = corpus_table(_dataset(), rule)
    assert table.total.dropped["output"] == {EMPTY: 1}
    assert table.total.kept["output"] == sum(len(t.steps) for t in _dataset()) - 1
