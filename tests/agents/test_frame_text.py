"""A DataFrame's to_string() text laid out as a notebook shows the frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris, load_wine

from themisto_env.agents.frame_text import notebook_frame_text


def _notebook_repr(frame: pd.DataFrame) -> str:
    """What ``repr(frame)`` gives in a Jupyter kernel (display.width 80, max_columns 20, max_rows 60)."""
    return frame.to_string(max_rows=60, min_rows=10, max_cols=20, line_width=80, show_dimensions="truncate")


def _frames() -> dict[str, pd.DataFrame]:
    frames = {}
    for name, loader in (("wine", load_wine), ("cancer", load_breast_cancer), ("diabetes", load_diabetes)):
        bunch = loader()
        df = pd.DataFrame(bunch.data, columns=bunch.feature_names)
        df["target"] = bunch.target
        frames[f"{name}.head()"] = df.head()
        frames[f"{name}.head(3)"] = df.head(3)
        frames[f"{name}.describe()"] = df.describe()
    iris = load_iris(as_frame=True).frame
    frames["iris.head() (fits in 80)"] = iris.head()
    frames["iris.groupby().mean()"] = iris.groupby("target").mean()
    frames["strings"] = pd.DataFrame({"city": ["New York", "Paris", "Rome"], "n": [1, 22, 333]})
    frames["nan and None"] = pd.DataFrame({"a": [1.0, np.nan, 3.5], "b b": ["x", None, "zz"]})
    frames["30 int columns"] = pd.DataFrame(np.arange(300).reshape(10, 30))
    return frames


FRAMES = _frames()


@pytest.mark.parametrize("name", list(FRAMES))
def test_the_layout_is_pandas_notebook_repr(name: str) -> None:
    frame = FRAMES[name]
    assert notebook_frame_text(frame.to_string()) == _notebook_repr(frame)


@pytest.mark.parametrize("text", ["", "42", "a\nbb", "   a\n0  1\n... [300 more characters]"])
def test_text_that_is_not_a_table_is_returned_unchanged(text: str) -> None:
    assert notebook_frame_text(text) == text
