"""The namespace fingerprint: the same state gives the same fingerprint in any kernel, however it was
reached; a changed value changes it; computing it never runs user code or copies large data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from themisto_env.sandbox.kernel.core import Kernel

SETUP = """
import numpy as np, pandas as pd
class Box:
    pass
def make(k):
    return lambda v: v * k
frame = pd.DataFrame({'day': pd.date_range('2024-01-01', periods=300), 'shop': ['a', 'b', 'c'] * 100,
                      'kind': pd.Categorical(list('xy') * 150), 'units': np.arange(300) % 7,
                      'price': np.linspace(0, 1, 300)})
frame['extra'] = frame['units'] * 2          # a second float/int block: the layout differs from a copy
series = frame.set_index(['shop', 'kind'])['price']
boxes = pd.Series([Box(), Box()])
tags = {'red', 'green', 'blue', 'cyan'}
stamps = np.array(['2024-01-01', '2024-02-01'], dtype='datetime64[D]')
big = np.arange(2_000_000, dtype=np.float64).reshape(1000, 2000)
wide = big.T                                  # not contiguous
times3 = make(3)
nested = {'a': [1, 2.5, 'x'], 'b': (None, True)}
"""


@pytest.fixture
def kernels(tmp_path: Path) -> Iterator[tuple[Kernel, Kernel]]:
    with Kernel("local", snapshot_dir=tmp_path / "store") as a, Kernel("local", snapshot_dir=tmp_path / "store") as b:
        yield a, b


def test_the_same_state_gives_the_same_fingerprint_in_two_kernels(kernels: tuple[Kernel, Kernel]) -> None:
    a, b = kernels
    for kernel in kernels:
        assert kernel.execute(SETUP).status == "ok"
    first, second = a.introspect.fingerprint(), b.introspect.fingerprint()
    assert first == second
    for name in ("frame", "series", "tags", "stamps", "big", "wide", "times3", "nested"):
        assert first[name].rsplit("|", 1)[1], f"{name} has a content hash"
    assert first["boxes"].endswith("|"), "objects whose str holds an address are not hashed"


def test_a_restored_state_has_the_fingerprint_of_the_replayed_one(kernels: tuple[Kernel, Kernel]) -> None:
    a, b = kernels
    a.execute(SETUP)
    b.execute(SETUP)
    snapshot = a.snapshots.save()
    b.restart()
    assert b.snapshots.restore(snapshot).fingerprint == a.introspect.fingerprint()
    b.execute("frame = frame.copy()")  # another block layout, the same values
    assert b.introspect.fingerprint()["frame"] == a.introspect.fingerprint()["frame"]


@pytest.mark.parametrize(
    "change",
    [
        "frame.loc[3, 'price'] += 1e-9",
        "frame.loc[5, 'shop'] = 'z'",
        "frame['kind'] = frame['kind'].cat.rename_categories({'x': 'q'})",
        "frame.loc[0, 'day'] = pd.Timestamp('1999-01-01')",
        "stamps[0] = np.datetime64('1999-01-01')",
        "times3 = make(4)",
        "nested['a'].append(1)",
        "tags.add('pink')",
    ],
)
def test_a_changed_value_changes_the_fingerprint(kernels: tuple[Kernel, Kernel], change: str) -> None:
    a, _ = kernels
    a.execute(SETUP)
    before = a.introspect.fingerprint()
    assert a.execute(change).status == "ok"
    after = a.introspect.fingerprint()
    assert {n for n in before if before[n] != after[n]}, change


def test_the_fingerprint_runs_no_user_code(kernels: tuple[Kernel, Kernel]) -> None:
    a, _ = kernels
    a.execute(
        "calls = []\n"
        "class Lazy:\n"
        "    def __len__(self):\n        calls.append('len'); return 3\n"
        "    def __repr__(self):\n        calls.append('repr'); return 'Lazy()'\n"
        "    def __str__(self):\n        calls.append('str'); return 'Lazy'\n"
        "lazy = Lazy()\nitems = [Lazy()]\n"
    )
    a.introspect.fingerprint()
    assert a.execute("print(calls)").outputs[0]["text"].strip() == "[]"


MODELS = """
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from sklearn.linear_model import LinearRegression
rng = np.random.default_rng(0)
x = rng.normal(size=(50, 2))
model = LinearRegression().fit(x, x @ [1.0, 2.0])
fig, ax = plt.subplots()
ax.plot([0, 1, 2], [0, 1, 4])
ax.set_title("squares")
bars = plt.figure()
bars.add_subplot().bar(["a", "b"], [3, 5])
"""


def test_fitted_models_and_figures_are_fingerprinted_by_content(kernels: tuple[Kernel, Kernel]) -> None:
    a, b = kernels
    for kernel in kernels:
        assert kernel.execute(MODELS).status == "ok"
    first = a.introspect.fingerprint()
    assert first == b.introspect.fingerprint(), "the same fits and plots give the same fingerprint"
    for name in ("model", "fig", "ax", "bars"):
        assert first[name].rsplit("|", 1)[1], f"{name} has a content hash"
    changes = {
        "model": "model = LinearRegression().fit(x, x @ [1.0, 3.0])",  # same class and parameters, other data
        "fig": "ax.plot([0, 1], [1, 0])",
        "ax": "ax.set_title('cubes')",
        "bars": "bars.axes[0].patches[0].set_height(4)",
    }
    for name, change in changes.items():
        assert b.execute(change).status == "ok"
        after = b.introspect.fingerprint()
        assert after[name] != first[name], f"{name}: {change!r} changes its fingerprint"
        first = after
