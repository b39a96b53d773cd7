"""``runtime-rules``: a rule-based agent that asks the live kernel instead of guessing.

Output prediction
    When the cell about to run ends by displaying one of these expressions of a variable ``x``, and
    nothing earlier in the cell mentions ``x`` (so the kernel's ``x`` is the one displayed), the agent
    asks a tool and predicts from its answer:

    ==================  ==================================  =================================================
    the cell ends with  tool call(s)                        prediction
    ==================  ==================================  =================================================
    ``x``               ``inspect_variable(x)``             the value's repr
    ``x.shape``         ``inspect_variable(x)``             the shape, e.g. ``(178, 13)``
    ``len(x)``          ``inspect_variable(x)``             the length (or the first dimension)
    ``type(x)``         ``inspect_variable(x)``             the class as IPython shows it: ``pandas.DataFrame``
    ``x.head(n)``       ``dataframe_head(x, n)``            the rows, laid out as a notebook shows them
    ``x.describe()``    ``dataframe_describe(x)``           the statistics, laid out likewise
    ``x.info()``        ``dataframe_info(x)``               the info text
    ``x.dtypes``        ``inspect_variable(x)`` then, for   ``dtype('float64')`` for a Series or array, the
                        a DataFrame, ``dataframe_info(x)``  dtypes Series' repr for a DataFrame
    ==================  ==================================  =================================================

    A trailing ``;`` (display suppressed), a tool error (no such variable, not a DataFrame), a spent
    budget or an env without tools make it fall back to the static baseline.
Next-cell prediction
    When the last executed cell ends by assigning a variable and showed nothing, people usually look
    at it next: the agent calls ``list_variables`` and, when the variable exists, predicts ``x.head()``
    for a DataFrame or Series and ``x`` otherwise. Else it falls back to the static baseline.

The static baseline is ``retrieval`` by default (``fallback="repeat-previous"`` for the other one).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Literal

from themisto_env.agents.base import Action, BaseAgent, Info, Observation
from themisto_env.agents.baselines import repeat_previous, retrieve
from themisto_env.agents.frame_text import notebook_frame_text
from themisto_env.agents.history import parse_history

from themisto_env.actions import Prediction
from themisto_env.tools import ToolCall

#: A rule: yields tool calls, is sent each call's result text, returns the prediction (None: fall back).
Plan = Generator[ToolCall, str, str | None]

DisplayKind = Literal["value", "shape", "len", "type", "head", "describe", "info", "dtypes"]

_CUT_MARKER = re.compile(r"\n?\.\.\. \[[\d,]+ more characters\]\s*\Z")
_MAGIC_LINE = re.compile(r"^\s*[%!]")
_INFO_ROW = re.compile(r"^\s*\d+\s+(?P<column>.+?)\s+\d+ non-null\s+(?P<dtype>\S+)\s*$")


@dataclass(frozen=True)
class DisplayedExpression:
    """What a cell's last line displays, in a form a tool can answer.

    Attributes:
        kind: Which expression of the variable (see the module docstring's table).
        name: The variable.
        n: The row count of ``head``.
    """

    kind: DisplayKind
    name: str
    n: int = 5


def displayed_expression(cell: str) -> DisplayedExpression | None:
    """The expression a cell ends by displaying, when a tool can answer it.

    Args:
        cell: The cell's source (IPython magic and shell lines are ignored).

    Returns:
        The expression, or None when the cell does not end with one of the supported expressions of a
        variable untouched earlier in the cell, or when the display is suppressed by a ``;``.
    """
    lines = [line for line in cell.rstrip().split("\n") if not _MAGIC_LINE.match(line)]
    if not lines or lines[-1].rstrip().endswith(";"):
        return None
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return None
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    found = _classify(tree.body[-1].value)
    if found is None:
        return None
    earlier = ast.Module(body=tree.body[:-1], type_ignores=[])
    if any(isinstance(node, ast.Name) and node.id == found.name for node in ast.walk(earlier)):
        return None
    return found


def _classify(expr: ast.expr) -> DisplayedExpression | None:
    if isinstance(expr, ast.Name):
        return DisplayedExpression("value", expr.id)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        if expr.attr in ("shape", "dtypes"):
            return DisplayedExpression(expr.attr, expr.value.id)  # type: ignore[arg-type]
        return None
    if not isinstance(expr, ast.Call):
        return None
    func, args, keywords = expr.func, expr.args, expr.keywords
    if isinstance(func, ast.Name) and func.id in ("len", "type") and len(args) == 1 and not keywords:
        if isinstance(args[0], ast.Name):
            return DisplayedExpression(func.id, args[0].id)  # type: ignore[arg-type]
        return None
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    name = func.value.id
    if func.attr in ("describe", "info") and not args and not keywords:
        return DisplayedExpression(func.attr, name)  # type: ignore[arg-type]
    if func.attr == "head":
        values = [*args, *(k.value for k in keywords if k.arg == "n")]
        if len(values) > 1 or len(keywords) > (0 if args else 1):
            return None
        if not values:
            return DisplayedExpression("head", name)
        value = values[0]
        if isinstance(value, ast.Constant) and isinstance(value.value, int) and 1 <= value.value <= 50:
            return DisplayedExpression("head", name, value.value)
    return None


# -- rules --------------------------------------------------------------------------------------------


def output_plan(expr: DisplayedExpression) -> Plan:
    """The tool calls that answer a displayed expression, and the prediction from their results."""
    if expr.kind in ("head", "describe", "info"):
        tool = {"head": "dataframe_head", "describe": "dataframe_describe", "info": "dataframe_info"}[expr.kind]
        args: dict[str, object] = {"name": expr.name, **({"n": expr.n} if expr.kind == "head" else {})}
        result = yield ToolCall(tool=tool, args=args)
        body = _body(result)
        if body is None:
            return None
        return body if expr.kind == "info" else notebook_frame_text(body)
    result = yield ToolCall(tool="inspect_variable", args={"name": expr.name, "max_chars": 4000})
    facts = _inspection(result)
    if facts is None:
        return None
    if expr.kind == "value":
        return facts.value
    if expr.kind == "shape":
        return facts.shape
    if expr.kind == "len":
        return facts.length
    if expr.kind == "type":
        return _qualified(facts.type)
    # dtypes
    if not _is_pandas(facts.type, "DataFrame"):
        return f"dtype('{facts.dtype}')" if facts.dtype else None
    info = yield ToolCall(tool="dataframe_info", args={"name": expr.name})
    body = _body(info)
    return _dtypes_repr(body) if body is not None else None


def next_cell_plan(observation: Observation) -> Plan:
    """Predict a look at the variable the last cell assigned, when it showed nothing."""
    cells = parse_history(str(observation.get("history", "")))
    if not cells or cells[-1].output.strip():
        return None
    name = _assigned_name(cells[-1].source)
    if name is None:
        return None
    listing = yield ToolCall(tool="list_variables", args={})
    types = _variable_types(listing)
    if name not in types:
        return None
    frame = _is_pandas(types[name], "DataFrame") or _is_pandas(types[name], "Series")
    return f"{name}.head()" if frame else name


# -- reading tool results -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Inspection:
    type: str
    shape: str | None
    length: str | None
    dtype: str | None
    value: str


def _body(result: str) -> str | None:
    """A dataframe tool's text without its ``name.view():`` title line (None for an error)."""
    if result.startswith("Error:") or "\n" not in result:
        return None
    return _CUT_MARKER.sub("", result.split("\n", 1)[1])


def _inspection(result: str) -> _Inspection | None:
    if result.startswith("Error:"):
        return None
    lines = result.split("\n")
    if len(lines) < 3 or ": " not in lines[0] or "value:" not in lines:
        return None
    type_name = lines[0].split(": ", 1)[1]
    facts = lines[1]
    shape = re.search(r"\bshape (\([\d, ]*\))", facts)
    length = re.search(r"\blen (\d+)", facts)
    dtype = re.search(r"\bdtype (\S+)", facts)
    value = "\n".join(lines[lines.index("value:") + 1 :])
    first_dim = re.match(r"\((\d+)", shape.group(1)) if shape else None
    return _Inspection(
        type=type_name,
        shape=shape.group(1) if shape else None,
        length=length.group(1) if length else (first_dim.group(1) if first_dim else None),
        dtype=dtype.group(1).rstrip(",") if dtype else None,
        value=_CUT_MARKER.sub("", value),
    )


def _is_pandas(type_name: str, cls: str) -> bool:
    """Whether a type name is pandas' ``cls`` (``pandas.DataFrame`` in pandas 3, ``pandas.core.frame...``)."""
    return type_name.startswith("pandas.") and type_name.rsplit(".", 1)[-1] == cls


def _qualified(type_name: str) -> str:
    """How IPython displays a class (``type(x)``): ``int``, ``numpy.float64``, ``__main__.Model``."""
    if "." in type_name or isinstance(getattr(builtins, type_name, None), type):
        return type_name
    return f"__main__.{type_name}"


def _dtypes_repr(info_text: str) -> str | None:
    """``df.dtypes`` as a notebook shows it, from ``df.info()``'s column table."""
    import pandas as pd

    rows = [m for line in info_text.split("\n") if (m := _INFO_ROW.match(line))]
    if not rows:
        return None
    dtypes = pd.Series([m["dtype"] for m in rows], index=[m["column"] for m in rows], dtype=object)
    return repr(dtypes)


def _variable_types(listing: str) -> dict[str, str]:
    """Name -> type from ``list_variables``' table."""
    if listing.startswith("Error:"):
        return {}
    types = {}
    for line in listing.split("\n")[2:]:
        parts = line.split()
        if len(parts) >= 2:
            types[parts[0]] = parts[1]
    return types


def _assigned_name(source: str) -> str | None:
    """The variable a cell's last statement assigns (``x = ...``, ``x: T = ...``), if any."""
    lines = [line for line in source.split("\n") if not _MAGIC_LINE.match(line)]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return None
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return last.targets[0].id
    if isinstance(last, ast.AnnAssign) and isinstance(last.target, ast.Name) and last.value is not None:
        return last.target.id
    return None


# -- the agent ----------------------------------------------------------------------------------------


class RuntimeRulesAgent(BaseAgent):
    """Answers displayed expressions from the live kernel through tools; static fallback otherwise.

    Args:
        fallback: The static baseline for samples no rule answers: ``retrieval`` or ``repeat-previous``.
        next_cell_rules: Whether to use the ``list_variables`` rule for next-cell prediction.
    """

    name = "runtime-rules"
    observation = "tools"

    def __init__(
        self, fallback: Literal["retrieval", "repeat-previous"] = "retrieval", *, next_cell_rules: bool = True
    ) -> None:
        super().__init__()
        baselines: dict[str, Callable[[Observation, str], str]] = {
            "retrieval": retrieve,
            "repeat-previous": repeat_previous,
        }
        if fallback not in baselines:
            raise ValueError(f"fallback must be 'retrieval' or 'repeat-previous', got {fallback!r}")
        self.fallback = fallback
        self._static = baselines[fallback]
        self.next_cell_rules = next_cell_rules
        self._plan: Plan | None = None
        self._first: Observation | None = None
        self._started = False
        #: How many samples a rule answered from tool results (the rest fell back), this episode.
        self.answered_by_tools = 0

    def start_episode(self, info: Info) -> None:
        """Forget the previous episode's counts."""
        self.answered_by_tools = 0

    def start_sample(self, observation: Observation, info: Info) -> None:
        """Pick the rule for this sample (if any)."""
        self._first = observation
        self._plan = None
        self._started = False
        if not info.get("tool_names"):
            return
        if info["task"] == "output":
            expr = displayed_expression(str(observation.get("cell", "")))
            self._plan = output_plan(expr) if expr is not None else None
        elif self.next_cell_rules:
            self._plan = next_cell_plan(observation)

    def decide(self, observation: Observation, info: Info) -> Action:
        """Advance the sample's rule by one tool call, or predict."""
        plan, task = self._plan, str(info["task"])
        first = self._first if self._first is not None else observation
        if plan is None:
            return Prediction(text=self._static(first, task))
        try:
            call = plan.send(str(observation.get("tool_result", "")) if self._started else None)
            self._started = True
        except StopIteration as done:
            self._plan = None
            if done.value is None:
                return Prediction(text=self._static(first, task))
            self.answered_by_tools += 1
            return Prediction(text=done.value)
        if int(observation.get("tools_left", 0)) <= 0 or call.tool not in info.get("tool_names", ()):
            self._plan = None
            plan.close()
            return Prediction(text=self._static(first, task))
        return call


__all__ = ["DisplayedExpression", "RuntimeRulesAgent", "displayed_expression", "next_cell_plan", "output_plan"]
