"""Which samples ``--limit N`` covers: spread over trajectories, seeded, the same in every path (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from themisto_env.data.samples import Sample, read_sample_ids, select_samples, selection_order
from themisto_env.errors import ConfigError, DataError


def _samples(sizes: dict[str, int]) -> list[Sample]:
    return [Sample(f"{t}/next-cell/{k}", "next-cell", t, k, f"x{k}") for t, n in sizes.items() for k in range(1, n + 1)]


SAMPLES = _samples({"a": 20, "b": 6, "c": 2, "d": 1})


def test_a_limit_spreads_over_the_trajectories_in_dataset_order() -> None:
    chosen = select_samples(SAMPLES, 8)
    assert len(chosen) == 8
    per = {t: sum(s.trajectory_id == t for s in chosen) for t in "abcd"}
    assert per["c"] == 2 and per["d"] == 1 and {per["a"], per["b"]} == {2, 3}, per  # round-robin
    assert chosen == sorted(chosen, key=SAMPLES.index)  # dataset order: episodes walk forward


def test_the_selection_is_seeded_nested_and_first_is_dataset_order() -> None:
    assert select_samples(SAMPLES, 8) == select_samples(list(SAMPLES), 8)
    assert select_samples(SAMPLES, 8, seed=1) != select_samples(SAMPLES, 8)  # another seed, other samples
    small, large = select_samples(SAMPLES, 5), select_samples(SAMPLES, 12)
    assert set(small) <= set(large)
    assert select_samples(SAMPLES, 5, order="first") == SAMPLES[:5]
    assert select_samples(SAMPLES, None) == SAMPLES == select_samples(SAMPLES, 1000)
    # the first N of the selection order are the limit's samples (what inspect's own --limit takes)
    assert set(selection_order(SAMPLES)[:8]) == set(select_samples(SAMPLES, 8))


def test_sample_ids_pin_the_selection_and_a_wrong_one_is_named() -> None:
    ids = ["b/next-cell/2", "a/next-cell/7"]
    assert [s.id for s in select_samples(SAMPLES, sample_ids=ids)] == ["a/next-cell/7", "b/next-cell/2"]
    with pytest.raises(ConfigError, match=r"no sample 'b/next-cell/9'.*did you mean"):
        select_samples(SAMPLES, sample_ids=["b/next-cell/9"])


def test_sample_ids_files_lines_or_results_jsonl(tmp_path: Path) -> None:
    lines = tmp_path / "ids.txt"
    lines.write_text("# pinned\na/next-cell/1\n\nb/next-cell/2\na/next-cell/1\n")
    assert read_sample_ids(lines) == ["a/next-cell/1", "b/next-cell/2"]
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"sample_id": "c/next-cell/1", "rouge_l": 0.5}) + "\n")
    assert read_sample_ids(results) == ["c/next-cell/1"]
    results.write_text('{"id": 3}\n')
    with pytest.raises(DataError, match=r"results.jsonl, row 1: a JSON line needs a sample_id"):
        read_sample_ids(results)
    with pytest.raises(DataError, match="cannot read"):
        read_sample_ids(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n# nothing\n")
    with pytest.raises(DataError, match="no sample ids"):
        read_sample_ids(tmp_path / "empty.txt")


def test_run_inspect_and_export_cover_the_same_samples(env_dataset: dict[str, str], tmp_path: Path) -> None:
    """``themisto run --limit``, the inspect task's limit (and inspect's own --limit) and the TRL export."""
    from themisto_env.bridges.inspect_task import themisto
    from themisto_env.bridges.rl.export import export_samples
    from themisto_env.replay.dataset import Dataset
    from themisto_env.run.config import RunConfig
    from themisto_env.run.plan import covered_samples

    dataset = Dataset.open(env_dataset["dataset"])
    samples = dataset.samples("output")
    config = RunConfig(task="output", data=env_dataset["dataset"], limit=3, selection_seed=4)
    run_ids = {s.id for s in covered_samples(samples, config)}
    assert len(run_ids) == 3
    task = themisto(task="output", data=env_dataset["dataset"], snapshot_dir=env_dataset["snapshot_dir"], limit=3,
                    selection_seed=4)  # fmt: skip
    assert {s.id for s in task.dataset} == run_ids
    whole = themisto(task="output", data=env_dataset["dataset"], selection_seed=4)
    assert {s.id for s in whole.dataset[:3]} == run_ids  # inspect eval --limit 3
    rows = export_samples("output", "static", limit=3, selection_seed=4, **env_dataset)
    assert {r["sample_id"] for r in rows} == run_ids
    pinned = tmp_path / "ids.txt"
    pinned.write_text("\n".join(sorted(run_ids)[:2]))
    config = config.model_copy(update={"limit": None, "sample_ids": str(pinned)})
    assert {s.id for s in covered_samples(samples, config)} == set(sorted(run_ids)[:2])
    assert {s.id for s in themisto(task="output", data=env_dataset["dataset"], sample_ids=str(pinned)).dataset} == set(
        sorted(run_ids)[:2]
    )
