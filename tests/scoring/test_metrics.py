"""Metrics: equality with rouge-score and sacrebleu, exact match, aggregation, paired comparison, reward."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pandas as pd
import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rouge_score import rouge_scorer, tokenize

import themisto_env.metrics as metrics
from themisto_env.metrics import (
    Score,
    _chrf,
    aggregate,
    chrf,
    compare_paired,
    exact_match,
    rouge_l,
    score,
)
from themisto_env.metrics._rouge import rouge_tokens
from themisto_env.metrics._sample import normalize_for_exact_match, score_many
from themisto_env.scoring.rule import RewardWeights, reward

_ROUGE = rouge_scorer.RougeScorer(["rougeL"])


def reference_rouge_l(prediction: str, reference: str) -> float:
    return _ROUGE.score(reference, prediction)["rougeL"].fmeasure


def reference_chrf(prediction: str, reference: str) -> float:
    return sacrebleu.sentence_chrf(prediction, [reference]).score / 100


# ---------------------------------------------------------------------------------------------------
# A corpus of realistic pairs: notebook code cells and printed DataFrames, each with a plausible guess.

_CELLS = [
    "import pandas as pd\nimport numpy as np\n\ndf = pd.read_csv('data/train.csv')\ndf.head()",
    "df.info()",
    "df.describe(include='all').T",
    "df['price'] = df['price'].fillna(df['price'].median())\ndf.isna().sum()",
    "X = df.drop(columns=['target'])\ny = df['target']\n"
    "X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=42)",
    "from sklearn.ensemble import RandomForestClassifier\n\n"
    "clf = RandomForestClassifier(n_estimators=200, max_depth=8, n_jobs=-1)\nclf.fit(X_train, y_train)",
    "print(classification_report(y_test, clf.predict(X_test)))",
    "fig, ax = plt.subplots(figsize=(10, 6))\nsns.histplot(df['age'], bins=30, ax=ax)\n"
    "ax.set_title('Âge — distribution')\nplt.show()",
    "for col in df.select_dtypes('object'):\n    print(col, df[col].nunique())",
    "def clean(text: str) -> str:\n    text = text.lower().strip()\n    return re.sub(r'[^a-z ]+', ' ', text)\n\n"
    "df['clean'] = df['text'].apply(clean)",
    "df.groupby(['city', 'year'])['price'].agg(['mean', 'median', 'count']).sort_values('mean')",
    "pipe = make_pipeline(StandardScaler(), LogisticRegression(C=0.5, max_iter=1000))\n"
    "scores = cross_val_score(pipe, X, y, cv=5)\nscores.mean(), scores.std()",
    "corr = df.corr(numeric_only=True)\nsns.heatmap(corr, annot=True, fmt='.2f', cmap='coolwarm')",
    "# 数据清洗\ndf = df[df['收入'] > 0]\nlen(df)",
    "model.fit(X_train, y_train, epochs=10, batch_size=32, validation_split=0.1)",
    "x = [i ** 2 for i in range(10)]\nx",
    "{}",
    "df.shape",
]


def _mutate(text: str, rng: random.Random, pool: list[str]) -> str:
    lines = text.split("\n")
    kind = rng.randrange(10)
    if kind == 0:
        return text
    if kind == 1 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    elif kind == 2:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(["print(df.shape)", "df.head(10)", "    pass"]))
    elif kind == 3:
        return text.replace("df", "data").replace("X_train", "x_tr")
    elif kind == 4:
        return text[: rng.randrange(len(text) + 1)]
    elif kind == 5:
        rng.shuffle(lines)
    elif kind == 6:
        return rng.choice(pool)
    elif kind == 7:
        return text.upper() if rng.random() < 0.5 else text.replace("  ", " ").replace("\n", " \n")
    elif kind == 8:
        return text + "\n" + rng.choice(pool)
    else:
        chars = list(text)
        for _ in range(rng.randrange(1, 6)):
            if chars:
                chars[rng.randrange(len(chars))] = rng.choice("xyz0_.( é")
        return "".join(chars)
    return "\n".join(lines)


def _dataframe_text(rng: random.Random) -> str:
    gen = np.random.default_rng(rng.randrange(2**32))
    n_rows, n_cols = rng.randrange(1, 12), rng.randrange(1, 6)
    data = gen.normal(size=(n_rows, n_cols)) * 10 ** rng.randrange(0, 4)
    df = pd.DataFrame(data, columns=[f"feature_{i}" for i in range(n_cols)]).round(rng.randrange(0, 4))
    if rng.random() < 0.3:
        df["city"] = gen.choice(["Paris", "München", "Zürich", "東京"], size=n_rows)
    return str(df) if rng.random() < 0.8 else str(df.describe())


def realistic_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (prediction, reference) pairs: half code cells, half printed DataFrames."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        if i % 2:
            reference = "\n\n".join(rng.sample(_CELLS, rng.randrange(1, 4)))
            prediction = _mutate(reference, rng, _CELLS)
        else:
            reference = _dataframe_text(rng)
            prediction = _mutate(reference, rng, [_dataframe_text(rng)])
        pairs.append((prediction, reference))
    return pairs


REALISTIC = realistic_pairs(400)

EDGE_CASES = [
    ("", ""),
    ("", "x = 1"),
    ("x = 1", ""),
    ("   ", "\n\t "),
    ("   ", "x"),
    ("[]", "[]"),
    ("{}", "[]"),
    ("x", "x"),
    ("ab", "abcdefgh"),
    ("abcdefgh", "ab"),
    ("aaaaa", "aaa"),
    ("a b c d e f", "abcdef"),
    ("\x00\x01\x02", "\x00\x01"),
    ("l\u2028x\u00a0y\u3000z", "lxyz"),
    ("Straße ÉCOLE ﬁne İstanbul", "strasse école fine istanbul"),
    ("日本語のテキストです", "日本語テキスト"),
    ("emoji 🎉🎉 party", "🎉 party"),
    ("x = 1\r\ny = 2\r\n", "x = 1\ny = 2\n"),
    ("\ud800 lone surrogate", "lone surrogate \udfff"),
]


# ---------------------------------------------------------------------------------------------------
# Equality with the reference implementations.


def test_rouge_l_equals_rouge_score() -> None:
    mismatches = [(p, r) for p, r in REALISTIC + EDGE_CASES if rouge_l(p, r) != reference_rouge_l(p, r)]
    assert not mismatches


def test_chrf_equals_sacrebleu() -> None:
    mismatches = [(p, r) for p, r in REALISTIC + EDGE_CASES if chrf(p, r) != reference_chrf(p, r)]
    assert not mismatches


def test_score_many_equals_references_on_realistic_pairs() -> None:
    predictions = [p for p, _ in REALISTIC]
    references = [r for _, r in REALISTIC]
    scores = score_many(predictions, references)
    assert [s.rouge_l for s in scores] == [reference_rouge_l(p, r) for p, r in REALISTIC]
    assert [s.chrf for s in scores] == [reference_chrf(p, r) for p, r in REALISTIC]
    # The corpus is varied: some exact, some partial, some unrelated.
    assert 0.05 < sum(s.exact_match for s in scores) / len(scores) < 0.5
    assert len({round(s.chrf, 3) for s in scores}) > 100


_WORDY = st.text(alphabet=st.sampled_from(list("ab AB1_.(\n\t\u00a0éÉ日本ß")), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_metrics_equal_references_on_arbitrary_text(prediction: str, reference: str) -> None:
    assert rouge_l(prediction, reference) == reference_rouge_l(prediction, reference)
    assert chrf(prediction, reference) == reference_chrf(prediction, reference)


@settings(max_examples=300, deadline=None)
@given(_WORDY, _WORDY)
def test_metrics_equal_references_on_overlapping_text(prediction: str, reference: str) -> None:
    # A small alphabet makes shared tokens and n-grams (and repeated ones) common.
    assert rouge_l(prediction, reference) == reference_rouge_l(prediction, reference)
    assert chrf(prediction, reference) == reference_chrf(prediction, reference)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=100) | st.text(st.characters(max_codepoint=127), max_size=100))
def test_rouge_tokens_equal_rouge_score_tokenizer(text: str) -> None:
    assert rouge_tokens(text) == tokenize.tokenize(text, None)


def test_rouge_tokens_on_every_ascii_character() -> None:
    text = "".join(chr(c) + " x" + chr(c) + "Y9" for c in range(128))
    assert rouge_tokens(text) == tokenize.tokenize(text, None)
    assert rouge_tokens("Hello_World, 3.14 x2") == ["hello", "world", "3", "14", "x2"]


def test_long_texts() -> None:
    rng = random.Random(1)
    reference = "\n".join(rng.choice(_CELLS) for _ in range(60))  # ~ 6,000 characters
    prediction = _mutate(reference, rng, _CELLS).replace("df", "frame")
    assert rouge_l(prediction, reference) == reference_rouge_l(prediction, reference)
    huge_ref = _dataframe_text(rng) * 300  # ~ 100,000 characters: chrF only, rouge-score's LCS is quadratic
    huge_pred = huge_ref[::-1][:50_000] + huge_ref[:50_000]
    assert chrf(huge_pred, huge_ref) == reference_chrf(huge_pred, huge_ref)


@pytest.mark.parametrize(
    ("prediction", "reference", "path"),
    [
        ("print('hello')", "print('help')", "ascii"),
        ("Привет, мир! ÀÉÎõü", "Привет мир ÀÉÎ", "code points"),
        ("日本語のテキスト " * 5, "日本語テキスト " * 3, "distinct characters"),
        (
            "".join(chr(0x4E00 + i) for i in range(0, 1600)),
            "".join(chr(0x4E00 + i) for i in range(800, 1600)) + "一二三",
            "counter fallback",
        ),
    ],
)
def test_chrf_encodings(prediction: str, reference: str, path: str) -> None:
    """Each way of encoding characters as digits (and the fallback) gives sacrebleu's value."""
    encoded = _chrf._digits("".join(prediction.split()) + "".join(reference.split()))
    if path == "counter fallback":
        assert encoded is None
    else:
        assert encoded is not None
        assert (encoded[1] == 129) == (path == "ascii")
    assert chrf(prediction, reference) == reference_chrf(prediction, reference)
    assert chrf(reference, prediction) == reference_chrf(reference, prediction)


def test_empty_and_blank_follow_the_libraries() -> None:
    assert score("", "") == Score(exact_match=1.0, rouge_l=0.0, chrf=0.0)
    assert score(" \n", "") == Score(exact_match=1.0, rouge_l=0.0, chrf=0.0)
    assert score("", "x = 1") == Score(exact_match=0.0, rouge_l=0.0, chrf=0.0)
    assert score("[]", "[]") == Score(exact_match=1.0, rouge_l=0.0, chrf=1.0)
    assert score("df.head()", "df.head()") == Score(exact_match=1.0, rouge_l=1.0, chrf=1.0)


# ---------------------------------------------------------------------------------------------------
# Exact match and the Score contract.


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("x = 1", "x = 1", 1.0),
        ("x = 1   \n", "x = 1", 1.0),
        ("\n\n  \nx = 1\n\n", "x = 1", 1.0),
        ("x = 1\r\ny = 2", "x = 1\ny = 2", 1.0),
        ("for i in a:\n    f(i)\t\n", "for i in a:\n    f(i)", 1.0),
        ("  x = 1", "x = 1", 0.0),  # leading indentation is kept
        ("x = 1\n\ny = 2", "x = 1\ny = 2", 0.0),  # inner blank lines are kept
        ("X = 1", "x = 1", 0.0),  # case is kept
        ("x=1", "x = 1", 0.0),  # inner spaces are kept
        ("", "", 1.0),
        ("   \n ", "", 1.0),
    ],
)
def test_exact_match(prediction: str, reference: str, expected: float) -> None:
    assert exact_match(prediction, reference) == expected
    assert score(prediction, reference).exact_match == expected


def test_normalize_for_exact_match() -> None:
    assert normalize_for_exact_match("\n  \n  a  \n\n b\t\n \n") == "  a\n\n b"


def test_score_is_a_frozen_contract() -> None:
    s = score("df.head()", "df.head(10)")
    assert [f.name for f in dataclasses.fields(Score)] == ["exact_match", "rouge_l", "chrf"]
    assert list(s.as_dict()) == list(metrics.METRICS)
    assert all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in s.as_dict().values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.chrf = 1.0  # type: ignore[misc]


def test_score_rejects_non_strings() -> None:
    with pytest.raises(TypeError, match="two str"):
        score(None, "x")  # type: ignore[arg-type]


def test_score_many_checks_lengths() -> None:
    with pytest.raises(ValueError, match="as many references"):
        score_many(["a", "b"], ["a"])
    assert score_many([], []) == []


# ---------------------------------------------------------------------------------------------------
# Aggregation and paired comparison.


def _random_scores(n: int, seed: int, shift: float = 0.0) -> list[Score]:
    rng = np.random.default_rng(seed)
    return [
        Score(
            exact_match=float(rng.random() < 0.2 + shift),
            rouge_l=float(np.clip(rng.beta(4, 2) + shift, 0, 1)),
            chrf=float(np.clip(rng.beta(5, 2) + shift, 0, 1)),
        )
        for _ in range(n)
    ]


def test_aggregate_means_and_intervals() -> None:
    scores = _random_scores(300, seed=1)
    result = aggregate(scores)
    assert result.n == 300
    assert result.confidence == 0.95
    for name in metrics.METRICS:
        estimate = getattr(result, name)
        assert estimate.mean == pytest.approx(np.mean([getattr(s, name) for s in scores]), abs=1e-12)
        assert estimate.ci_low <= estimate.mean <= estimate.ci_high
        assert 0.0 < estimate.ci_high - estimate.ci_low < 0.2
    assert result.as_dict()["rouge_l"]["mean"] == result.rouge_l.mean


def test_aggregate_is_deterministic_under_seed() -> None:
    scores = _random_scores(100, seed=2)
    assert aggregate(scores, seed=7) == aggregate(scores, seed=7)
    assert aggregate(scores, seed=7) != aggregate(scores, seed=8)


def test_aggregate_interval_narrows() -> None:
    identical = [Score(exact_match=0.0, rouge_l=0.7, chrf=0.25)] * 500
    result = aggregate(identical)
    assert (result.rouge_l.ci_low, result.rouge_l.mean, result.rouge_l.ci_high) == (0.7, 0.7, 0.7)
    assert result.exact_match.ci_high == 0.0
    few = aggregate(_random_scores(20, seed=3))
    many = aggregate(_random_scores(2000, seed=3))
    assert many.chrf.ci_high - many.chrf.ci_low < (few.chrf.ci_high - few.chrf.ci_low) / 3


def test_aggregate_single_sample_and_confidence() -> None:
    one = aggregate([Score(1.0, 0.5, 0.25)])
    assert (one.n, one.chrf.ci_low, one.chrf.ci_high) == (1, 0.25, 0.25)
    scores = _random_scores(200, seed=4)
    wide, narrow = aggregate(scores, confidence=0.99), aggregate(scores, confidence=0.5)
    assert wide.rouge_l.ci_high - wide.rouge_l.ci_low > narrow.rouge_l.ci_high - narrow.rouge_l.ci_low


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"n_resamples": 0}, "n_resamples"), ({"confidence": 1.0}, "confidence"), ({"confidence": 0}, "confidence")],
)
def test_aggregate_rejects_bad_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aggregate(_random_scores(5, seed=0), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        aggregate([])


def test_compare_paired_identical_runs() -> None:
    scores = _random_scores(100, seed=5)
    result = compare_paired(scores, scores)
    for name in metrics.METRICS:
        d = getattr(result, name)
        assert (d.mean_diff, d.ci_low, d.ci_high) == (0.0, 0.0, 0.0)
        assert (d.wins, d.ties, d.losses) == (0, 100, 0)
        assert not d.significant


def test_compare_paired_detects_a_better_run() -> None:
    b = _random_scores(200, seed=6)
    a = [Score(s.exact_match, min(1.0, s.rouge_l + 0.05), s.chrf) for s in b]
    result = compare_paired(a, b)
    assert result.rouge_l.wins + result.rouge_l.ties == 200
    assert result.rouge_l.losses == 0
    assert result.rouge_l.ci_low > 0.0
    assert result.rouge_l.significant
    assert result.rouge_l.mean_diff == pytest.approx(result.rouge_l.mean_a - result.rouge_l.mean_b)
    reverse = compare_paired(b, a)
    assert (reverse.rouge_l.wins, reverse.rouge_l.losses) == (result.rouge_l.losses, result.rouge_l.wins)
    assert reverse.rouge_l.ci_high < 0.0
    assert result.chrf.ties == 200
    assert result.as_dict()["rouge_l"]["wins"] == result.rouge_l.wins


def test_compare_paired_keeps_the_pairing() -> None:
    # B is A plus a tiny constant: unpaired intervals would overlap, the paired one excludes zero.
    a = _random_scores(50, seed=7)
    b = [Score(s.exact_match, s.rouge_l * 0.99, s.chrf) for s in a]
    result = compare_paired(a, b, seed=3)
    assert result.rouge_l.ci_low > 0.0
    assert compare_paired(a, b, seed=3) == result
    unpaired_a, unpaired_b = aggregate(a).rouge_l, aggregate(b).rouge_l
    assert unpaired_a.ci_low < unpaired_b.ci_high


def test_compare_paired_rejects_mismatched_runs() -> None:
    with pytest.raises(ValueError, match="same samples"):
        compare_paired(_random_scores(3, seed=0), _random_scores(4, seed=0))


def test_bootstrap_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resampling in several chunks gives the same kind of interval as in one."""
    from themisto_env.metrics import _corpus

    scores = _random_scores(400, seed=8)
    whole = aggregate(scores, n_resamples=300)
    monkeypatch.setattr(_corpus, "_CHUNK_ELEMENTS", 400 * 7)
    chunked = aggregate(scores, n_resamples=300)
    assert chunked == aggregate(scores, n_resamples=300)
    assert chunked.rouge_l.mean == whole.rouge_l.mean
    assert chunked.rouge_l.ci_low == pytest.approx(whole.rouge_l.ci_low, abs=0.02)


def _trajectory_scores(trajectories: int, per_trajectory: int, seed: int) -> tuple[list[Score], list[str]]:
    """Samples perfectly correlated within their trajectory: every sample of a trajectory scores the same."""
    rng = np.random.default_rng(seed)
    scores, groups = [], []
    for t in range(trajectories):
        value = Score(float(rng.random() < 0.3), float(rng.beta(2, 2)), float(rng.beta(3, 2)))
        scores += [value] * per_trajectory
        groups += [f"trajectory-{t}"] * per_trajectory
    return scores, groups


def test_cluster_bootstrap_resamples_trajectories() -> None:
    """With correlated samples the trajectory bootstrap is wider, about sqrt(samples per trajectory)
    times, and close to the analytic interval over trajectory means; the sample bootstrap is too narrow."""
    scores, groups = _trajectory_scores(60, 10, seed=11)
    by_sample = aggregate(scores, n_resamples=4000)
    by_trajectory = aggregate(scores, groups=groups, n_resamples=4000)
    values = np.array([s.rouge_l for s in scores[::10]])  # one value per trajectory
    analytic = 2 * 1.959964 * values.std() / math.sqrt(len(values))
    width = by_trajectory.rouge_l.ci_high - by_trajectory.rouge_l.ci_low
    narrow = by_sample.rouge_l.ci_high - by_sample.rouge_l.ci_low
    assert by_trajectory.rouge_l.mean == by_sample.rouge_l.mean
    assert width == pytest.approx(analytic, rel=0.1)
    assert narrow == pytest.approx(analytic / math.sqrt(10), rel=0.1)
    assert width > 2.5 * narrow
    # Identical samples within a trajectory: exactly the sample bootstrap over one sample per trajectory.
    once = aggregate(scores[::10], n_resamples=4000)
    for name in metrics.METRICS:
        assert getattr(by_trajectory, name).ci_low == pytest.approx(getattr(once, name).ci_low, abs=1e-12)
        assert getattr(by_trajectory, name).ci_high == pytest.approx(getattr(once, name).ci_high, abs=1e-12)


def test_cluster_bootstrap_is_seeded_and_reduces_to_the_sample_bootstrap() -> None:
    scores = _random_scores(150, seed=12)
    groups = [f"t{i // 7}" for i in range(150)]  # trajectories of 7 samples (the last one of 3)
    assert aggregate(scores, groups=groups) == aggregate(scores, groups=groups)
    assert aggregate(scores, groups=groups, seed=7) != aggregate(scores, groups=groups, seed=8)
    assert aggregate(scores, groups=groups) != aggregate(scores)
    # One sample per trajectory: the same draws as the sample bootstrap.
    alone, plain = aggregate(scores, groups=range(150)), aggregate(scores)
    for name in metrics.METRICS:
        assert getattr(alone, name).ci_low == pytest.approx(getattr(plain, name).ci_low, abs=1e-12)
        assert getattr(alone, name).ci_high == pytest.approx(getattr(plain, name).ci_high, abs=1e-12)
    # Unequal trajectories: the statistic is the mean over the drawn samples; constants stay exact.
    constant = aggregate([Score(0.0, 0.7, 0.25)] * 10, groups=[0, 0, 0, 0, 0, 0, 1, 2, 2, 3])
    assert (constant.rouge_l.ci_low, constant.rouge_l.ci_high) == (0.7, 0.7)
    with pytest.raises(ValueError, match="one trajectory per sample"):
        aggregate(scores, groups=groups[:-1])


def test_compare_paired_resamples_trajectories() -> None:
    b, groups = _trajectory_scores(40, 8, seed=13)
    rng = np.random.default_rng(14)
    shifts = np.repeat(rng.normal(0.02, 0.05, size=40), 8)  # A's gain varies by trajectory
    a = [Score(s.exact_match, float(np.clip(s.rouge_l + d, 0, 1)), s.chrf) for s, d in zip(b, shifts, strict=True)]
    by_sample, by_trajectory = compare_paired(a, b), compare_paired(a, b, groups=groups)
    assert by_trajectory.rouge_l.mean_diff == by_sample.rouge_l.mean_diff
    assert (by_trajectory.rouge_l.wins, by_trajectory.rouge_l.losses) == (
        by_sample.rouge_l.wins,
        by_sample.rouge_l.losses,
    )
    wide = by_trajectory.rouge_l.ci_high - by_trajectory.rouge_l.ci_low
    assert wide > 2 * (by_sample.rouge_l.ci_high - by_sample.rouge_l.ci_low)
    assert compare_paired(a, b, groups=groups) == by_trajectory
    with pytest.raises(ValueError, match="one trajectory per sample"):
        compare_paired(a, b, groups=groups[1:])


# ---------------------------------------------------------------------------------------------------
# Reward.


def test_reward_default_weights() -> None:
    s = Score(exact_match=0.0, rouge_l=0.6, chrf=0.8)
    assert reward(s) == pytest.approx(0.7)
    assert reward(Score(1.0, 0.0, 1.0)) == 1.0  # "[]" predicted exactly
    assert reward(Score(0.0, 0.0, 0.0)) == 0.0


def test_reward_weighted_mean() -> None:
    s = Score(exact_match=1.0, rouge_l=0.5, chrf=0.25)
    w = RewardWeights(exact_match=1.0, rouge_l=2.0, chrf=1.0, full_on_exact_match=False)
    assert reward(s, w) == pytest.approx((1.0 + 1.0 + 0.25) / 4)
    assert reward(s, RewardWeights(exact_match=0, rouge_l=1, chrf=0, full_on_exact_match=False)) == 0.5
    assert reward(s, RewardWeights(exact_match=0, rouge_l=1, chrf=0)) == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rouge_l": -0.1},
        {"exact_match": 0, "rouge_l": 0, "chrf": 0},
        {"chrf": math.nan},
        {"chrf": math.inf},
        {"bleu": 1.0},
    ],
)
def test_reward_weights_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        RewardWeights(**kwargs)  # type: ignore[arg-type]


_UNIT = st.floats(min_value=0.0, max_value=1.0)
_WEIGHT = st.floats(min_value=0.0, max_value=1e6)


@given(_UNIT, _UNIT, _UNIT, _WEIGHT, _WEIGHT, _WEIGHT.filter(lambda w: w > 1e-300), st.booleans())
def test_reward_in_unit_interval(
    em: float, rl: float, cf: float, w_em: float, w_rl: float, w_cf: float, full: bool
) -> None:
    weights = RewardWeights(exact_match=w_em, rouge_l=w_rl, chrf=w_cf, full_on_exact_match=full)
    assert 0.0 <= reward(Score(em, rl, cf), weights) <= 1.0
