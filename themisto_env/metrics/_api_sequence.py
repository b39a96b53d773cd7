"""JuICe's API-sequence precision and recall: which library calls a predicted cell makes that the real one does.

Follows the authors' code for JuICe (Agashe, Iyer and Zettlemoyer, EMNLP 2019, arXiv:1910.02216): the
extraction is ``gen_api_seq`` in ``jupyter/preprocess/tokenize_utils.py`` and ``NO_API_SEQUENCE`` comes from
``jupyter/new_pipeline/to_dataset.py`` (rajasagashe/JuICe); the scores are
``Metric.compute_precision_recall_f1`` in ``fairseq/bleu.py`` (rajasagashe/JuICe-models).
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import re
import token
import tokenize
from dataclasses import dataclass

from themisto_env.syntax import parse as parse_python

__all__ = ["API_SEQUENCE_METRICS", "NO_API_SEQUENCE", "ApiSequenceScore", "api_sequence", "api_sequence_score"]

API_SEQUENCE_METRICS: tuple[str, ...] = ("api_precision", "api_recall", "api_f1")
"""The names of the API-sequence scores in a result row's ``scores`` and in ``summary.json``."""

NO_API_SEQUENCE = "NO_API_SEQUENCE"
"""JuICe's sequence of a cell that calls nothing (scored like any other name)."""

_IPYTHON_ADDED = frozenset({"display", "get_ipython", "_", "__", "___", "__IPYTHON__"})
BUILTIN_NAMES: frozenset[str] = frozenset(
    (set(dir(builtins)) - _IPYTHON_ADDED)
    | set(keyword.kwlist)
    | {"xrange", "reduce", "unicode", "file", "reload"}  # JuICe's additions (Python 2's builtins)
)
"""Names a bare call of which is not an API call: Python's builtins and keywords, as JuICe's list (not
IPython's additions to the builtins: ``display(df)`` is an API call wherever this runs)."""

_MAGIC_LINE = re.compile(r"^\s*[%!]")


def _blank_magics(code: str) -> str:
    return "\n".join("" if _MAGIC_LINE.match(line) else line for line in code.split("\n"))


def api_sequence(code: str) -> list[str]:
    """The API calls a cell makes, in the order they are written, by JuICe's rules.

    A call counts when its callee is written as a name or an attribute, and is named by that last name:
    ``f(x)`` is ``f`` unless ``f`` is a builtin or keyword (``print``, ``len``; IPython's ``display``
    counts); ``obj.method(x)`` is ``method``, builtin or not, so an import alias changes nothing
    (``pd.read_csv`` is ``read_csv``). A chain or a nesting is one call per link, in written order
    (``df.groupby("a").mean()`` is ``["groupby", "mean"]``). Not calls: a callee that is not a name
    (``fs[0](x)``), ``def`` and ``class``, calls inside an f-string (JuICe's Python 3.6 tokenizer saw one
    string); a decorator call is one. Magic and shell lines are blanked first. Code that does not parse
    falls back to JuICe's token rule on the tokens before the first error (a name directly followed by
    ``(``); the two agree on code that parses but for a callee and its ``(`` on different lines.

    Args:
        code: A cell's source (a prediction or a reference).

    Returns:
        The called names, repeats kept; empty when the code calls nothing.
    """
    code = _blank_magics(code)
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte
        return _token_sequence(code)
    return _ast_sequence(tree)


class _Calls(ast.NodeVisitor):
    """Collects ``(line, byte offset, name)`` of each API call's name."""

    def __init__(self) -> None:
        self.found: list[tuple[int, int, str]] = []

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        """An f-string: one token to JuICe, nothing inside counts."""

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id not in BUILTIN_NAMES:
                self.found.append((func.lineno, func.col_offset, func.id))
        elif isinstance(func, ast.Attribute) and func.end_lineno is not None and func.end_col_offset is not None:
            start = func.end_col_offset - len(func.attr.encode("utf-8"))  # where the attribute's name starts
            self.found.append((func.end_lineno, start, func.attr))
        self.generic_visit(node)


def _ast_sequence(tree: ast.AST) -> list[str]:
    calls = _Calls()
    calls.visit(tree)
    return [name for _, _, name in sorted(calls.found)]


def _tokens(code: str) -> list[tokenize.TokenInfo]:
    """The tokens of ``code`` (newlines, comments and indents included, as JuICe's) up to the first
    tokenizer error (an unclosed bracket or string, a bad dedent)."""
    found: list[tokenize.TokenInfo] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == token.ENDMARKER:
                break
            found.append(tok)
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _token_sequence(code: str) -> list[str]:
    """JuICe's ``gen_api_seq`` over the tokens: a name directly followed by ``(``, not a declaration,
    and not a builtin or keyword unless it follows a ``.``."""
    toks = _tokens(code)
    names: list[str] = []
    for i, tok in enumerate(toks[:-1]):
        if tok.type != token.NAME or toks[i + 1].string != "(":
            continue
        before = toks[i - 1].string if i > 0 else ""
        if before in ("def", "class"):
            continue
        if tok.string not in BUILTIN_NAMES or before == ".":
            names.append(tok.string)
    return names


@dataclass(frozen=True, slots=True)
class ApiSequenceScore:
    """JuICe's API-sequence scores of one prediction against its reference, each in [0, 1].

    Attributes:
        precision: Share of the prediction's distinct API names that the reference calls too.
        recall: Share of the reference's distinct API names that the prediction calls too.
        f1: Their harmonic mean (0.0 when both are 0).
    """

    precision: float
    recall: float
    f1: float

    def as_dict(self) -> dict[str, float]:
        """The scores keyed by the names of [`API_SEQUENCE_METRICS`][themisto_env.metrics.API_SEQUENCE_METRICS] (for a
        row's ``scores``)."""
        return dict(zip(API_SEQUENCE_METRICS, (self.precision, self.recall, self.f1), strict=True))


def api_sequence_score(prediction: str, reference: str) -> ApiSequenceScore:
    """JuICe's precision, recall and F1 of the prediction's API calls against the reference's.

    As JuICe computes them, over the *sets* of names (order and repeats do not count): precision is the
    share of the predicted names the reference calls, recall the share of the reference's names the
    prediction calls, F1 their harmonic mean. A cell that calls nothing has the one name
    ``NO_API_SEQUENCE``, so two such cells score 1.0 and one against a cell that calls something 0.0.

    Args:
        prediction: The predicted cell.
        reference: The real cell.

    Returns:
        The scores, each in [0, 1].
    """
    predicted = set(api_sequence(prediction)) or {NO_API_SEQUENCE}
    wanted = set(api_sequence(reference)) or {NO_API_SEQUENCE}
    common = len(predicted & wanted)
    precision = common / len(predicted)
    recall = common / len(wanted)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return ApiSequenceScore(precision=precision, recall=recall, f1=f1)
