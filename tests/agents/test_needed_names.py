"""What a cell needs from the kernel before it runs: names, and DataFrame columns."""

from __future__ import annotations

import pytest

from themisto_env.agents.needed_names import column_lookups, needed_names

NEEDED = [
    ("plt.figure()\ndf['a'].hist()\nplt.title('a')", ["plt", "df"]),
    ("clf = LogisticRegression()\nclf.fit(X, y)", ["LogisticRegression", "X", "y"]),
    ("from sklearn.svm import SVC\nSVC().fit(X, y)", ["X", "y"]),
    ("import numpy as np\nnp.zeros(3)", []),
    ("import matplotlib.pyplot as plt\nplt.show()", []),
    ("x = 1\nprint(x)", []),
    ("print(x)\nx = 1", ["x"]),
    ("x += 1", ["x"]),
    ("for i in range(n):\n    total = total + i", ["n", "total"]),
    ("with open(path) as f:\n    f.read()", ["path"]),
    ("def f(a, b=default):\n    return a + undefined_inside\nf(1)", ["default"]),
    ("class M(Base):\n    attr = inside\nM()", ["Base"]),
    ("g = lambda v: v * k\ng(2)", []),
    ("[x * k for x in xs if x > t]", ["xs", "t", "k"]),
    ("{k: v for k, v in d.items()}", ["d"]),
    ("if (m := size(data)) > 3:\n    print(m)", ["size", "data"]),
    ("%time r = run()\nr + offset", ["offset"]),  # the magic line's words count as bound
    ("%matplotlib inline\nplt.plot(x)", ["plt", "x"]),
    ("display(df)\nget_ipython()\nlen(_)", ["df"]),
    ("try:\n    x\nexcept NameError:\n    pass", []),  # not analysed
    ("from numpy import *\narray([1])", []),  # not analysed
    ("x = (", []),  # a syntax error
]


@pytest.mark.parametrize(("source", "names"), NEEDED, ids=[s for s, _ in NEEDED])
def test_needed_names(source: str, names: list[str]) -> None:
    assert needed_names(source) == names


LOOKUPS = [
    ("df['colour']", [("df", "colour")]),
    ("y = df.pop('target')\nX = df", [("df", "target")]),
    ("df['a'] = 1\ndf['b']", []),  # the second statement sees a touched df
    ("df['a'] = df['b'] * 2", [("df", "b")]),  # read before the assignment
    ("df[['a', 'b']]", []),
    ("df[col]", []),
    ("d = {}\nd['x']", []),
    ("def f():\n    return df['z']", []),
    ("x = df['a'] + other['b']", [("df", "a"), ("other", "b")]),
]


@pytest.mark.parametrize(("source", "lookups"), LOOKUPS, ids=[s for s, _ in LOOKUPS])
def test_column_lookups(source: str, lookups: list[tuple[str, str]]) -> None:
    assert column_lookups(source) == lookups
