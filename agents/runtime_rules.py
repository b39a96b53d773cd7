"""``runtime-rules``: a rule-based agent that asks the live kernel instead of guessing.

For output prediction it predicts the ``NameError`` or ``KeyError`` the kernel's state implies, or answers
a displayed expression of a kernel variable (``x``, ``x.shape``, ``x.head(n)``, ...) from one observation
tool; for next-cell prediction it predicts a look at the variable the last cell assigned. Anything else
falls back to a static baseline. The rules are on `RuntimeRulesAgent`;
what a cell displays is read by `displayed`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Generator
from typing import Any, Literal

from pydantic import BaseModel

from themisto_env.agents.base import BaseAgent, Info, Observation
from themisto_env.agents.baselines import repeat_previous, retrieve
from themisto_env.agents.displayed import (
    SCALAR_KINDS,
    DisplayedExpression,
    displayed_class,
    displayed_expression,
    is_pandas,
)
from themisto_env.agents.frame_text import notebook_frame_text
from themisto_env.agents.history import parse_history
from themisto_env.agents.needed_names import column_lookups, needed_names, parse_cell
from themisto_env.env.actions import Action, Prediction
from themisto_env.env.tools import TOOLS, ToolCall
from themisto_env.sandbox.kernel.answers import FrameView, VariableDetail, VariableListing

#: A rule: yields tool calls, is sent each call's result (`Answer`), returns the prediction (None: fall back).
Plan = Generator[ToolCall, "Answer", str | None]

#: The marker with which a bounded text says how much was cut.
CUT_MARKER = re.compile(r"\n?\.\.\. \[[\d,]+ more characters\]\s*\Z")

#: The error of an inspect_variable call on a name the kernel does not define.
UNDEFINED = "no variable named"


class Answer:
    """A tool call's result as a rule reads it: the typed answer (None on an error) and the error."""

    def __init__(self, tool_result: dict[str, Any] | None) -> None:
        result = tool_result or {}
        data, tool = result.get("data"), TOOLS.get(str(result.get("tool")))
        self.data: BaseModel | None = tool.answer.model_validate(data) if data is not None and tool else None
        self.error: str | None = result.get("error") if result else "no answer"

    def of(self, model: type[Any]) -> Any:
        """The answer if it is a ``model``, else None (and None for a variable whose value was shortened)."""
        if isinstance(self.data, VariableDetail) and self.data.shortened:
            return None
        return self.data if isinstance(self.data, model) else None


def variable_types(answer: Answer) -> dict[str, str] | None:
    """Name -> type of a ``list_variables`` answer (None when the tool failed)."""
    listing: VariableListing | None = answer.of(VariableListing)
    return {row.name: row.type for row in listing.variables} if listing is not None else None


def frame_columns(answer: Answer) -> dict[str, str] | None:
    """Column -> dtype of a ``dataframe_info`` answer (None for an error or a frame too wide to list)."""
    view: FrameView | None = answer.of(FrameView)
    return view.dtypes or None if view is not None else None


def uncut(text: str) -> str:
    """A bounded text without its cut marker."""
    return CUT_MARKER.sub("", text)


Fallback = Literal["auto", "retrieval", "repeat-previous"]

#: IPython's pretty printer breaks a tuple over lines when it is wider than this.
_PRETTY_WIDTH = 79


# -- rules --------------------------------------------------------------------------------------------


def output_plan(observation: Observation, budget: int) -> Plan:
    """The output rules for the cell about to run: first whether it fails, then what it displays.

    Args:
        observation: The sample's first observation (its ``cell`` and ``history``).
        budget: The tool calls available for the sample.
    """
    cell = str(observation.get("cell", ""))
    expr = displayed_expression(cell)
    reserve = 1 if expr is not None else 0
    needed, lookups = needed_names(cell), column_lookups(cell)
    if (needed or lookups) and budget - reserve >= 1:
        listing = yield ToolCall(tool="list_variables", args={})
        budget -= 1
        types = variable_types(listing)
        imported = imported_names(observation)
        for name in needed if types is not None else ():
            if name in types or name in imported:  # type: ignore[operator]
                continue
            if budget - reserve < 1:
                break
            budget -= 1
            error = (yield _inspect(name)).error
            if error is not None and error.startswith(UNDEFINED):
                return f"NameError: name '{name}' is not defined"
        for name, column in lookups if types is not None else ():
            if not is_pandas(types.get(name, ""), "DataFrame") or budget - reserve < 1:  # type: ignore[union-attr]
                continue
            budget -= 1
            columns = frame_columns((yield ToolCall(tool="dataframe_info", args={"name": name})))
            if columns is not None and column not in columns:
                return f"KeyError: '{column}'"
    if expr is None:
        return None
    return (yield from display_plan(expr))


def display_plan(expr: DisplayedExpression) -> Plan:
    """The tool calls that answer a displayed expression, and the prediction from their results."""
    if expr.kind in ("head", "describe", "info"):
        tool = {"head": "dataframe_head", "describe": "dataframe_describe", "info": "dataframe_info"}[expr.kind]
        args: dict[str, object] = {"name": expr.name, **({"n": expr.n} if expr.kind == "head" else {})}
        view: FrameView | None = (yield ToolCall(tool=tool, args=args)).of(FrameView)
        if view is None:
            return None
        return uncut(view.text) if expr.kind == "info" else notebook_frame_text(uncut(view.text))
    if expr.kind == "tuple":
        inspected: dict[str, VariableDetail | None] = {}
        for name in dict.fromkeys(part.name for part in expr.parts):
            inspected[name] = (yield _inspect(name)).of(VariableDetail)
        texts = [_scalar(part, inspected[part.name]) for part in expr.parts]
        if any(text is None or "\n" in text for text in texts):
            return None
        return _tuple_repr([text for text in texts if text is not None])
    facts: VariableDetail | None = (yield _inspect(expr.name)).of(VariableDetail)
    if expr.kind in SCALAR_KINDS:
        return _scalar(expr, facts)
    if facts is None:
        return None
    # dtypes
    if not is_pandas(facts.type, "DataFrame"):
        return f"dtype('{facts.dtype}')" if facts.dtype else None
    dtypes = frame_columns((yield ToolCall(tool="dataframe_info", args={"name": expr.name})))
    return repr(_series(dtypes)) if dtypes is not None else None


def _series(dtypes: dict[str, str]) -> Any:
    """``df.dtypes`` as a Series of dtype names (its repr is what a notebook shows)."""
    import pandas as pd

    return pd.Series(list(dtypes.values()), index=list(dtypes), dtype=object)


def _inspect(name: str) -> ToolCall:
    return ToolCall(tool="inspect_variable", args={"name": name, "max_chars": 4000})


def _scalar(expr: DisplayedExpression, facts: VariableDetail | None) -> str | None:
    """The text of a ``value``, ``shape``, ``len`` or ``type`` expression from the variable's inspection."""
    if facts is None:
        return None
    if expr.kind == "value":
        return uncut(facts.repr)
    if expr.kind == "shape":
        shape = facts.shape
        return None if shape is None else "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
    if expr.kind == "len":
        if facts.shape is not None:
            return str(facts.shape[0]) if facts.shape else None
        return str(facts.length) if facts.length is not None else None
    return displayed_class(facts.type)


def _tuple_repr(items: list[str]) -> str:
    """A tuple as IPython prints it: on one line, or one element per line when too wide."""
    one_line = "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if len(one_line) <= _PRETTY_WIDTH:
        return one_line
    return "(" + ",\n ".join(items) + ("," if len(items) == 1 else "") + ")"


def next_cell_plan(observation: Observation) -> Plan:
    """Predict a look at the variable the last cell assigned, when it showed nothing."""
    name = silently_assigned(observation)
    if name is None:
        return None
    types = variable_types((yield ToolCall(tool="list_variables", args={}))) or {}
    return look_at(name, types[name]) if name in types else None


def silently_assigned(observation: Observation) -> str | None:
    """The variable the last cell of the history assigned, when that cell showed nothing."""
    cells = parse_history(str(observation.get("history", "")))
    return assigned_name(cells[-1].source) if cells and not cells[-1].output.strip() else None


def look_at(name: str, type_name: str) -> str:
    """The look at a variable people take next: ``x.head()`` for a DataFrame or Series, else ``x``."""
    return f"{name}.head()" if is_pandas(type_name, "DataFrame") or is_pandas(type_name, "Series") else name


def imported_names(observation: Observation) -> set[str]:
    """Names bound by imports in the visible history (taken as still defined, to save tool calls)."""
    names: set[str] = set()
    for cell in parse_history(str(observation.get("history", ""))):
        parsed = parse_cell(cell.source)
        for node in ast.walk(parsed[0]) if parsed is not None else ():
            if isinstance(node, ast.Import | ast.ImportFrom):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    return names


def assigned_name(source: str) -> str | None:
    """The variable a cell's last statement assigns (``x = ...``, ``x: T = ...``), if any."""
    parsed = parse_cell(source)
    last = parsed[0].body[-1] if parsed is not None and parsed[0].body else None
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return last.targets[0].id
    if isinstance(last, ast.AnnAssign) and isinstance(last.target, ast.Name) and last.value is not None:
        return last.target.id
    return None


# -- the agent ----------------------------------------------------------------------------------------


class RuntimeRulesAgent(BaseAgent):
    """Answers displayed expressions from the live kernel through tools; static fallback otherwise.

    Output prediction: first, whether the cell fails: a name it reads (in evaluation order, `needed_names`)
    that the kernel does not define gives ``NameError: name 'x' is not defined``; ``df['col']`` or
    ``df.pop('col')`` on a kernel DataFrame without that column gives ``KeyError: 'col'``. One tool call is
    kept for the display rule; names left unchecked for lack of budget are taken as defined. Otherwise, when
    the cell ends by displaying one of these of a variable ``x`` that nothing earlier in the cell mentions:

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

    A tuple of the first four is answered element by element. A trailing ``;``, a tool error, a spent budget
    or an env without tools fall back to the static baseline.

    Next-cell prediction: when the last executed cell ends by assigning a variable and showed nothing, the
    agent calls ``list_variables`` and, when the variable exists, predicts ``x.head()`` for a DataFrame or
    Series and ``x`` otherwise; else the static baseline.

    Args:
        fallback: The static baseline for samples no rule answers: ``retrieval``, ``repeat-previous``, or
            ``auto`` (retrieval for output prediction, repeat-previous for next-cell prediction: the better
            of the two on the bundled data for each task).
    """

    name = "runtime-rules"
    observation = "tools"

    def __init__(self, fallback: Fallback = "auto") -> None:
        super().__init__()
        if fallback not in ("auto", "retrieval", "repeat-previous"):
            raise ValueError(f"fallback must be 'auto', 'retrieval' or 'repeat-previous', got {fallback!r}")
        self.fallback = fallback
        self._plan: Plan | None = None
        self._first: Observation | None = None
        self._started = False
        #: How many samples a rule answered from tool results (the rest fell back), this episode.
        self.answered_by_tools = 0

    def _static(self, observation: Observation, task: str) -> str:
        name = self.fallback if self.fallback != "auto" else ("retrieval" if task == "output" else "repeat-previous")
        return (retrieve if name == "retrieval" else repeat_previous)(observation, task)

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
            self._plan = output_plan(observation, int(observation.get("tools_left", 0)))
        else:
            self._plan = next_cell_plan(observation)

    def decide(self, observation: Observation, info: Info) -> Action:
        """Advance the sample's rule by one tool call, or predict."""
        plan, task = self._plan, str(info["task"])
        first = self._first if self._first is not None else observation
        if plan is None:
            return Prediction(text=self._static(first, task))
        try:
            call = plan.send(Answer(info.get("tool_result"))) if self._started else next(plan)
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


__all__ = [
    "Answer",
    "RuntimeRulesAgent",
    "assigned_name",
    "display_plan",
    "frame_columns",
    "imported_names",
    "look_at",
    "next_cell_plan",
    "output_plan",
    "silently_assigned",
    "variable_types",
]
