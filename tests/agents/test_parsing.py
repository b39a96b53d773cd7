"""Reading predictions out of replies as real models write them."""

from __future__ import annotations

import pytest

from themisto_env.agents.parsing import extract_prediction

NEXT_CELL = [
    ("fenced python", "```python\ndf.head()\n```", "df.head()"),
    (
        "lead-in and commentary",
        "Here is the next cell:\n\n```python\ndf.head()\n```\n\nThis shows the first rows.",
        "df.head()",
    ),
    (
        "sure lead-in",
        "Sure! Here's the next cell the developer will most likely run:\n"
        "```python\nX = df.drop(columns=['target'])\ny = df['target']\n```",
        "X = df.drop(columns=['target'])\ny = df['target']",
    ),
    ("py tag", "```py\nplt.show()\n```", "plt.show()"),
    ("no tag", "```\nmodel.fit(X_train, y_train)\n```", "model.fit(X_train, y_train)"),
    ("tilde fence", "~~~python\nprint(df.columns)\n~~~", "print(df.columns)"),
    ("four backticks", "````python\ns = '```'\n````", "s = '```'"),
    (
        "unclosed fence (token limit)",
        "```python\nfor col in df.columns:\n    print(col, df[col].nunique())",
        "for col in df.columns:\n    print(col, df[col].nunique())",
    ),
    ("bare code", "df.describe()", "df.describe()"),
    (
        "bare code with explanation",
        "df.isnull().sum()\n\nThe developer will probably check for missing values next.",
        "df.isnull().sum()",
    ),
    (
        "explanation then bare code",
        "Looking at the history, the next step is to check the data types.\n\ndf.dtypes",
        "df.dtypes",
    ),
    (
        "bold lead-in",
        "**Next cell:**\n\n```python\nfrom sklearn.model_selection import train_test_split\n```",
        "from sklearn.model_selection import train_test_split",
    ),
    ("inline lead-in", "Next cell: df.info()", "df.info()"),
    ("single backticks", "`df.tail()`", "df.tail()"),
    ("one-line fence", "```df.info()```", "df.info()"),
    (
        "imitates the history's headers",
        "# In [12]:\nmodel.fit(X, y)\n# Out [12]:\nLinearRegression()",
        "model.fit(X, y)",
    ),
    ("ipython prompt", "In [7]:\nscores.mean()", "scores.mean()"),
    (
        "previous block then the answer",
        "The last cell was:\n```python\nx = 1\n```\nThe next cell will be:\n```python\nprint(x)\n```",
        "print(x)",
    ),
    (
        "output block before code block",
        "It will print:\n```text\n42\n```\nand the next cell is\n```python\nanswer = 42\n```",
        "answer = 42",
    ),
    (
        "think section",
        "<think>They just loaded the data, so they will look at it.</think>\n```python\ndf.head()\n```",
        "df.head()",
    ),
    ("answer tag", "I think it's a plot.\n<answer>\nplt.plot(x, y)\n</answer>", "plt.plot(x, y)"),
    ("indented block", "```python\n    df.shape\n```", "df.shape"),
    (
        "keeps inner blank lines",
        "```python\nimport numpy as np\n\n\ndef f(x):\n    return x\n```",
        "import numpy as np\n\n\ndef f(x):\n    return x",
    ),
    ("windows newlines", "```python\r\nx = 1\r\ny = 2\r\n```", "x = 1\ny = 2"),
    ("code ending with a colon is kept", "for i in range(3):\n    print(i)", "for i in range(3):\n    print(i)"),
    ("a bare name is kept", "result", "result"),
    ("annotated assignment is kept", "result: int = 5", "result: int = 5"),
    (
        "magic",
        "```python\n%matplotlib inline\nimport matplotlib.pyplot as plt\n```",
        "%matplotlib inline\nimport matplotlib.pyplot as plt",
    ),
    ("empty reply", "", ""),
]

OUTPUT = [
    ("plain fence", "```\n(178, 13)\n```", "(178, 13)"),
    ("python-tagged fence", "```python\n(178, 13)\n```", "(178, 13)"),
    ("text tag preferred over python", "```python\ndf.shape\n```\nwhich prints\n```text\n(178, 13)\n```", "(178, 13)"),
    ("lead-in", "The output will be:\n```\n0.9444444444444444\n```", "0.9444444444444444"),
    ("inline lead-in", "Output: (178, 13)", "(178, 13)"),
    ("Out prompt", "Out[5]: 42", "42"),
    ("history-style Out header", "# Out [5]:\n42", "42"),
    ("trailing explanation", "(178, 13)\n\nThis is the shape of the DataFrame: 178 rows and 13 columns.", "(178, 13)"),
    ("keeps a table's layout", "```\n   a  b\n0  1  2\n1  3  4\n```", "   a  b\n0  1  2\n1  3  4"),
    ("keeps inner blank lines", "```\nfold 1: 0.91\n\nfold 2: 0.93\n```", "fold 1: 0.91\n\nfold 2: 0.93"),
    ("error line", "It raises:\n```\nKeyError: 'colour_intensity'\n```", "KeyError: 'colour_intensity'"),
    ("think then answer", "<think>\nshape of wine is 178 x 13\n</think>\n\n```\n(178, 13)\n```", "(178, 13)"),
    ("unclosed think: no answer", "<think>\nthe data has 178 rows and", ""),
    ("output tag", "<output>\n[1, 2, 3]\n</output>", "[1, 2, 3]"),
    (
        "bare multi-line",
        "count    178.0\nmean      13.0\nName: alcohol, dtype: float64",
        "count    178.0\nmean      13.0\nName: alcohol, dtype: float64",
    ),
    ("figure", "Sure.\n```\n<Figure size 640x480 with 1 Axes>\n```", "<Figure size 640x480 with 1 Axes>"),
]


@pytest.mark.parametrize(("reply", "expected"), [c[1:] for c in NEXT_CELL], ids=[c[0] for c in NEXT_CELL])
def test_next_cell_replies(reply: str, expected: str) -> None:
    assert extract_prediction(reply, "next-cell") == expected


@pytest.mark.parametrize(("reply", "expected"), [c[1:] for c in OUTPUT], ids=[c[0] for c in OUTPUT])
def test_output_replies(reply: str, expected: str) -> None:
    assert extract_prediction(reply, "output") == expected


def test_output_keeps_leading_spaces_of_the_first_line() -> None:
    # A DataFrame's header line starts with spaces: they are part of the output.
    assert extract_prediction("```\n     a\n0  1.0\n```", "output") == "     a\n0  1.0"
