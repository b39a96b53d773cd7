"""JuICe's API-sequence metric: the extraction against an independent transcription of JuICe's token rule,
hand-checked examples, the edge cases, and properties of the scores."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import io
import keyword
import tokenize

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from themisto_env.metrics import API_SEQUENCE_METRICS, api_sequence, api_sequence_score
from themisto_env.metrics._api_sequence import ApiSequenceScore

# -- an oracle: JuICe's extraction as its authors wrote it (templatized token types, then gen_api_seq) ----

_JUICE_KEYWORDS = (
    (set(dir(builtins)) - {"display", "get_ipython", "_", "__", "___", "__IPYTHON__"})
    | set(keyword.kwlist)
    | {"xrange", "reduce", "unicode", "file", "reload"}
)


def juice_api_sequence(code: str) -> list[str]:
    """JuICe's ``tokenize_and_templatize`` then ``gen_api_seq`` (rajasagashe/JuICe,
    jupyter/preprocess/tokenize_utils.py), restated: every token's text, and a type that is ``NAME``
    only for names that are neither builtins nor keywords; a token followed by ``(`` is an API call when
    its type is ``NAME`` or it follows a ``.``, unless it follows ``def`` or ``class``. JuICe dropped
    cells that did not tokenize; here the tokens before the tokenizer's error are used."""
    tokens: list[str] = []
    types: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.ENDMARKER:
                break
            tokens.append(tok.string)
            is_plain_name = tok.type == tokenize.NAME and tok.string not in _JUICE_KEYWORDS
            types.append("NAME" if is_plain_name else tok.string)
    except (tokenize.TokenError, SyntaxError):
        pass
    sequence = []
    for i in range(len(tokens) - 1):
        if tokens[i + 1] != "(":
            continue
        if i >= 1 and tokens[i - 1] in ("def", "class"):
            continue
        if types[i] == "NAME" or (i >= 1 and tokens[i - 1] == "."):
            sequence.append(tokens[i])
    return sequence


# -- generated programs --------------------------------------------------------------------------------

NAMES = ["f", "g", "df", "np", "pd", "plt", "print", "len", "sum", "max", "sorted", "read_csv", "mean", "head"]


def _expressions() -> st.SearchStrategy[ast.expr]:
    leaves = st.sampled_from(NAMES).map(lambda n: ast.Name(id=n, ctx=ast.Load()))

    def extend(children: st.SearchStrategy[ast.expr]) -> st.SearchStrategy[ast.expr]:
        return st.one_of(
            st.builds(lambda f, a: ast.Call(func=f, args=a, keywords=[]), children, st.lists(children, max_size=2)),
            st.builds(lambda v, n: ast.Attribute(value=v, attr=n, ctx=ast.Load()), children, st.sampled_from(NAMES)),
            st.builds(lambda v: ast.Subscript(value=v, slice=ast.Constant(0), ctx=ast.Load()), children),
            st.builds(lambda a, b: ast.BinOp(left=a, op=ast.Add(), right=b), children, children),
            st.builds(lambda e: ast.List(elts=e, ctx=ast.Load()), st.lists(children, max_size=2)),
            st.builds(lambda v: ast.JoinedStr(values=[ast.Constant("v="), ast.FormattedValue(v, -1, None)]), children),
            st.builds(lambda v, k: ast.Call(func=v, args=[], keywords=[ast.keyword("key", k)]), children, children),
        )

    return st.recursive(leaves, extend, max_leaves=12)


def _statements(expressions: st.SearchStrategy[ast.expr]) -> st.SearchStrategy[ast.stmt]:
    name = st.sampled_from(NAMES)
    return st.one_of(
        st.builds(ast.Expr, expressions),
        st.builds(lambda n, v: ast.Assign(targets=[ast.Name(n, ast.Store())], value=v, lineno=1), name, expressions),
        st.builds(
            lambda n, d, v: ast.FunctionDef(
                name=n, args=ast.arguments([], [], None, [], [], None, []), body=[ast.Return(v)], decorator_list=d
            ),
            name,
            st.lists(expressions, max_size=1),
            expressions,
        ),
        st.builds(
            lambda n, b: ast.ClassDef(name=n, bases=b, keywords=[], body=[ast.Pass()], decorator_list=[]),
            name,
            st.lists(expressions, max_size=2),
        ),
    )


@st.composite
def programs(draw: st.DrawFn) -> str:
    body = draw(st.lists(_statements(_expressions()), min_size=1, max_size=4))
    module = ast.Module(body=body, type_ignores=[])
    try:
        code = ast.unparse(ast.fix_missing_locations(module))
    except (ValueError, SyntaxError):  # an f-string nesting unparse cannot write
        assume(False)
    try:
        ast.parse(code)
    except SyntaxError:
        assume(False)
    return code


@settings(max_examples=200, deadline=None)
@given(programs())
@pytest.mark.slow
def test_on_code_that_parses_the_syntax_tree_reading_is_juice_s_token_rule(code: str) -> None:
    assert api_sequence(code) == juice_api_sequence(code)


@settings(max_examples=200, deadline=None)
@given(programs(), st.integers(min_value=1, max_value=199))
@pytest.mark.slow
def test_truncated_code_falls_back_to_juice_s_token_rule(code: str, cut: int) -> None:
    """A prediction cut short (unclosed brackets, half a name, half a string): JuICe's rule over the
    tokens before the tokenizer's first error."""
    prefix = code[: max(1, len(code) * cut // 200)]
    assert api_sequence(prefix) == juice_api_sequence(prefix)


# -- what counts, and how it is named ------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, expected",
    [
        # JuICe's own example cell (rajasagashe/JuICe, jupyter/preprocess/visitor.py)
        (
            "from sklearn.neighbors import KNeighborsClassifier\n\nknn = KNeighborsClassifier()\n"
            "knn.fit(wine_data_train, wine_labels_train)",
            ["KNeighborsClassifier", "fit"],
        ),
        ('df.groupby("a").mean()', ["groupby", "mean"]),
        ('df.groupby("a")["b"].agg(["mean", "std"]).reset_index()', ["groupby", "agg", "reset_index"]),
        ("f(g(x), h(y))", ["f", "g", "h"]),
        ("a.b(c.d(e.f()))", ["b", "d", "f"]),
        ("print(len(df))", []),  # builtins called bare are not API calls
        ("max(a)", []),
        ("np.max(a); df.sum()", ["max", "sum"]),  # ... but as methods they are
        ("sorted(x, key=lambda r: r.score())", ["score"]),
        ("display(df.head())", ["display", "head"]),  # IPython's display is not a Python builtin
        ("fs[0](x)", []),  # a callee that is not a name
        ("make()(x)", ["make"]),
        ("(lambda v: v)(3)", []),
        ("def fit(model):\n    return model.train()", ["train"]),  # a def is not a call
        ("class Net(nn.Module):\n    pass", []),
        ("class Net(base()):\n    pass", ["base"]),
        ('@app.route("/")\ndef index():\n    return render()', ["route", "render"]),
        ('name = f"{df.shape()} rows"', []),  # calls inside an f-string: one token to JuICe
        ("x = 1\ny = x + 2", []),
        ("", []),
        ("if(ready): go()", ["go"]),  # keywords followed by ( are not calls
        ("df.head()\ndf.head()", ["head", "head"]),  # repeats kept in the sequence
    ],
)
def test_api_sequence(code: str, expected: list[str]) -> None:
    assert api_sequence(code) == expected


def test_an_import_alias_does_not_change_the_name() -> None:
    aliased = api_sequence("import pandas as pd\ndf = pd.read_csv('a.csv')")
    qualified = api_sequence("import pandas\ndf = pandas.read_csv('a.csv')")
    imported = api_sequence("from pandas import read_csv\ndf = read_csv('a.csv')")
    assert aliased == qualified == imported == ["read_csv"]


def test_ipython_magics_and_shell_lines_are_skipped() -> None:
    assert api_sequence("%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot(x)") == ["plot"]
    assert api_sequence("!pip install seaborn\nsns.heatmap(corr())") == ["heatmap", "corr"]
    assert api_sequence("%%time\nmodel.fit(X, y)") == ["fit"]


@pytest.mark.parametrize(
    "code, expected",
    [
        ('df.groupby("a").agg(', ["groupby", "agg"]),  # cut short: an unclosed bracket
        ('print "rows:", len(df)\ndf.describe()', ["describe"]),  # Python 2
        ('s = "unclosed\nplt.show()', ["show"]),  # a broken one-line string: an error token, then on
        ('df.head()\ns = """unclosed\nplt.show()', ["head"]),  # a broken triple-quoted string: the end
        ("if x:\n        a.b()\n    c.d()", ["b"]),  # a bad dedent: the tokens before it
        ("model.fit(X y)\nmodel.predict(X)", ["fit", "predict"]),  # a syntax error the tokenizer passes
        ("df.head()\x00", ["head"]),  # a NUL byte: ast refuses it
        ("%%bash\nls -la && wc(1)", ["wc"]),  # a cell magic's body that is not Python
    ],
)
def test_code_that_does_not_parse_falls_back_to_the_tokens(code: str, expected: list[str]) -> None:
    assert api_sequence(code) == expected


# -- the scores ----------------------------------------------------------------------------------------


def test_hand_checked_scores() -> None:
    reference = "df = pd.read_csv('a.csv')\ndf.describe()\ndf.head()"
    score = api_sequence_score("df = pd.read_csv('a.csv')\ndf.head()", reference)
    assert score == ApiSequenceScore(precision=1.0, recall=pytest.approx(2 / 3), f1=pytest.approx(0.8))
    score = api_sequence_score("df.head(); df.plot(); df.tail()", reference)  # 1 of 3 right, 1 of 3 found
    assert score.precision == pytest.approx(1 / 3) and score.recall == pytest.approx(1 / 3)
    assert score.f1 == pytest.approx(1 / 3)


def test_sets_not_sequences_as_juice_scores_them() -> None:
    assert api_sequence_score("g(); f(); f()", "f(); g()") == ApiSequenceScore(1.0, 1.0, 1.0)  # order, repeats
    assert api_sequence_score("f(); f(); h()", "f()") == ApiSequenceScore(0.5, 1.0, pytest.approx(2 / 3))


def test_cells_without_api_calls_score_as_juice_s_no_api_sequence() -> None:
    assert api_sequence_score("x = 1", "y = len(z)") == ApiSequenceScore(1.0, 1.0, 1.0)  # both call nothing
    assert api_sequence_score("", "") == ApiSequenceScore(1.0, 1.0, 1.0)
    assert api_sequence_score("x = 1", "df.head()") == ApiSequenceScore(0.0, 0.0, 0.0)
    assert api_sequence_score("df.head()", "x = 1") == ApiSequenceScore(0.0, 0.0, 0.0)
    assert api_sequence_score("df.head()", "df.tail()") == ApiSequenceScore(0.0, 0.0, 0.0)


def test_as_dict_is_keyed_by_the_row_field_names() -> None:
    score = api_sequence_score("df.head()", "df.head(); df.tail()")
    assert score.as_dict() == {"api_precision": 1.0, "api_recall": 0.5, "api_f1": pytest.approx(2 / 3)}
    assert tuple(score.as_dict()) == API_SEQUENCE_METRICS
    with pytest.raises(dataclasses.FrozenInstanceError):
        score.precision = 0.0  # type: ignore[misc]


@settings(max_examples=100, deadline=None)
@given(programs())
def test_identical_code_scores_one(code: str) -> None:
    assert api_sequence_score(code, code) == ApiSequenceScore(1.0, 1.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(programs(), programs())
@pytest.mark.slow
def test_swapping_the_two_swaps_precision_and_recall(a: str, b: str) -> None:
    forward, backward = api_sequence_score(a, b), api_sequence_score(b, a)
    assert (forward.precision, forward.recall) == (backward.recall, backward.precision)
    assert forward.f1 == pytest.approx(backward.f1)
    for value in (forward.precision, forward.recall, forward.f1):
        assert 0.0 <= value <= 1.0
    assert forward.f1 <= max(forward.precision, forward.recall)
