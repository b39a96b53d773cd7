"""``runtime-state``: one offline agent for all three observation modes, using the state before the cell.

It reads what the kernel holds *before* the cell runs, never the target: in ``tools`` mode through the
observation tools, in ``full`` mode from the runtime dump (`themisto_env.agents.runtime_dump`), and in
``static`` mode not at all (its static baseline answers). So the same agent in the three modes measures
what runtime information buys. Its rules are ``runtime-rules``' plus ``print(...)`` of those expressions,
and for next-cell prediction a repair of a cell that failed on a name or column the state lacks
(`themisto_env.agents.runtime_repair`).
"""

from __future__ import annotations

import ast

from themisto_env.agents.base import Info, Observation
from themisto_env.agents.displayed import DisplayedExpression, displayed_expression
from themisto_env.agents.needed_names import parse_cell
from themisto_env.agents.runtime_dump import dump_answer, read_dump
from themisto_env.agents.runtime_repair import dump_repair, repair_plan
from themisto_env.agents.runtime_rules import (
    Fallback,
    Plan,
    RuntimeRulesAgent,
    display_plan,
    look_at,
    next_cell_plan,
    output_plan,
    silently_assigned,
)
from themisto_env.env.actions import Action, Prediction

#: The kinds whose ``print`` shows what their display shows (``type`` and ``info`` print otherwise).
PRINTABLE = frozenset({"value", "shape", "len", "head", "describe", "dtypes", "tuple"})


def printed_expressions(cell: str) -> list[DisplayedExpression] | None:
    """The arguments of a cell's last line when it is ``print(a, b, ...)`` of expressions a tool can answer
    (each of a variable the cell does not mention earlier), else None."""
    parsed = parse_cell(cell)
    if parsed is None or not parsed[0].body:
        return None
    body = parsed[0].body
    last = body[-1]
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)):
        return None
    call = last.value
    if not (isinstance(call.func, ast.Name) and call.func.id == "print") or call.keywords or not call.args:
        return None
    earlier = ast.unparse(ast.Module(body=body[:-1], type_ignores=[]))
    found = []
    for arg in call.args:
        expr = displayed_expression(f"{earlier}\n{ast.unparse(arg)}")
        if expr is None or expr.kind not in PRINTABLE:
            return None
        found.append(expr)
    return found


def printed_text(displayed: str) -> str | None:
    """What ``print`` shows of a value displayed as ``displayed``: a string literal without its quotes, an
    array's repr refused (its ``str`` differs), anything else as displayed."""
    if displayed.startswith(("array(", "masked_array(")):
        return None
    if displayed[:1] in ("'", '"') or displayed[:2] in ("b'", 'b"'):
        try:
            value = ast.literal_eval(displayed)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        return value if isinstance(value, str) else str(value)
    return displayed


def print_plan(exprs: list[DisplayedExpression]) -> Plan:
    """The tool calls answering each printed expression, and the printed line from their results."""
    texts = []
    for expr in exprs:
        shown = yield from display_plan(expr)
        text = printed_text(shown) if shown is not None else None
        if text is None:
            return None
        texts.append(text)
    return " ".join(texts)


def state_output_plan(observation: Observation, budget: int) -> Plan:
    """The ``tools`` output rules: ``print(...)`` of answerable expressions, else ``runtime-rules``'."""
    printed = printed_expressions(str(observation.get("cell", "")))
    if printed is not None:
        return (yield from print_plan(printed))
    return (yield from output_plan(observation, budget))


def dump_output(observation: Observation) -> str | None:
    """The ``full`` output rule: the displayed or printed expression answered from the runtime dump."""
    variables = read_dump(str(observation.get("runtime", "")))
    if not variables:
        return None
    cell = str(observation.get("cell", ""))
    printed = printed_expressions(cell)
    if printed is not None:
        texts = [dump_answer(expr, variables) for expr in printed]
        lines = [printed_text(t) if t is not None else None for t in texts]
        return " ".join(line for line in lines if line is not None) if all(lines) else None
    expr = displayed_expression(cell)
    return dump_answer(expr, variables) if expr is not None else None


def state_next_cell_plan(observation: Observation) -> Plan:
    """The ``tools`` next-cell rules: the failed cell fixed from the state, else ``runtime-rules``' look at
    the variable the last cell assigned."""
    fixed = yield from repair_plan(observation)
    if fixed is not None:
        return fixed
    return (yield from next_cell_plan(observation))


def dump_next_cell(observation: Observation) -> str | None:
    """The ``full`` next-cell rules from the runtime dump: the failed cell fixed, else a look at the variable
    the last cell assigned, if the dump holds it."""
    fixed = dump_repair(observation)
    if fixed is not None:
        return fixed
    name = silently_assigned(observation)
    variables = read_dump(str(observation.get("runtime", "")))
    return look_at(name, variables[name].type) if name is not None and name in variables else None


class RuntimeStateAgent(RuntimeRulesAgent):
    """Answers from the state before the cell: tools in tools mode, the runtime dump in full mode, the
    static baseline in static mode (one family in all three modes).

    Args:
        fallback: The static baseline (as for ``runtime-rules``): ``auto``, ``retrieval`` or
            ``repeat-previous``.
    """

    name = "runtime-state"
    observation = None  # every mode: the point is to compare them

    def __init__(self, fallback: Fallback = "auto") -> None:
        super().__init__(fallback)
        self._answer: str | None = None

    def start_sample(self, observation: Observation, info: Info) -> None:
        """Pick the sample's rule by the env's mode: a tool plan, an answer from the dump, or none."""
        self._first, self._plan, self._started, self._answer = observation, None, False, None
        mode = info.get("observation_mode")
        task = info["task"]
        if info.get("tool_names") and mode in (None, "tools"):
            budget = int(observation.get("tools_left", 0))
            self._plan = (
                state_output_plan(observation, budget) if task == "output" else state_next_cell_plan(observation)
            )
        elif mode == "full" or (mode is None and observation.get("runtime")):
            self._answer = dump_output(observation) if task == "output" else dump_next_cell(observation)

    def decide(self, observation: Observation, info: Info) -> Action:
        """Predict from the dump (full mode), or advance the tool plan (tools mode), or fall back."""
        if self._answer is not None:
            self.answered_by_tools += 1  # answered from the state (here: the dump)
            return Prediction(text=self._answer)
        return super().decide(observation, info)


__all__ = [
    "PRINTABLE",
    "RuntimeStateAgent",
    "dump_next_cell",
    "dump_output",
    "print_plan",
    "printed_expressions",
    "printed_text",
    "state_next_cell_plan",
    "state_output_plan",
]
