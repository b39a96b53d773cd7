"""runtime-rules: which cells it answers from the kernel, and that tool-queried context beats static context."""

from __future__ import annotations

import pytest

from tests.agents.conftest import MakeEnv
from tests.agents.episodes import mean, run_agent
from themisto_env.agents import make_agent
from themisto_env.agents.displayed import DisplayedExpression, displayed_expression
from themisto_env.agents.runtime_rules import RuntimeRulesAgent
from themisto_env.env.actions import Prediction
from themisto_env.env.tools import ToolCall

CELLS = [
    ("df", DisplayedExpression("value", "df")),
    ("df.shape", DisplayedExpression("shape", "df")),
    ("df.head()", DisplayedExpression("head", "df")),
    ("df.head(3)", DisplayedExpression("head", "df", 3)),
    ("df.head(n=10)", DisplayedExpression("head", "df", 10)),
    ("df.describe()", DisplayedExpression("describe", "df")),
    ("df.info()", DisplayedExpression("info", "df")),
    ("df.dtypes", DisplayedExpression("dtypes", "df")),
    ("len(scores)", DisplayedExpression("len", "scores")),
    ("type(model)", DisplayedExpression("type", "model")),
    ("import numpy as np\nx.shape", DisplayedExpression("shape", "x")),
    ("%matplotlib inline\ndf.head()", DisplayedExpression("head", "df")),
    (
        "X.shape, len(y)",
        DisplayedExpression("tuple", "", parts=(DisplayedExpression("shape", "X"), DisplayedExpression("len", "y"))),
    ),
    ("X.shape, y.head()", None),
    ("y = f()\nX.shape, y.shape", None),
    ("df.head();", None),  # display suppressed
    ("df = load()\ndf.head()", None),  # the kernel's df is not the one displayed
    ("df['x'] = 1\ndf.shape", None),
    ("df.tail()", None),
    ("df.head(-2)", None),
    ("df.groupby('a').mean()", None),
    ("x = df.shape", None),
    ("print(df)", None),
    ("len(df.columns)", None),
    ("for i in x:\n    pass", None),
    ("df.head(", None),  # a syntax error
    ("", None),
]


@pytest.mark.parametrize(("cell", "expected"), CELLS, ids=[c[0] or "empty" for c in CELLS])
def test_displayed_expression(cell: str, expected: DisplayedExpression | None) -> None:
    assert displayed_expression(cell) == expected


def test_without_tools_it_falls_back_to_the_static_baseline() -> None:
    agent = RuntimeRulesAgent()
    info = {"sample_id": "s", "task": "output", "tool_names": ()}
    obs = {"history": "# In [1]:\nx = 1\n", "cell": "x", "runtime": "", "tool_result": "", "tools_left": 0}
    agent.reset(info)
    assert agent.act(obs, info) == Prediction(text="")
    with pytest.raises(ValueError, match="fallback"):
        RuntimeRulesAgent(fallback="oracle")  # type: ignore[arg-type]


TOOLS = ("list_variables", "inspect_variable", "dataframe_head", "dataframe_info")
LISTING = {
    "tool": "list_variables",
    "ok": True,
    "error": None,
    "data": {
        "variables": [
            {"name": "df", "type": "pandas.DataFrame", "size_bytes": 1100, "shape": [4, 2], "length": 4},
            {"name": "n", "type": "int", "size_bytes": 28},
        ],
        "total": 2,
    },
}


def _failed(tool: str, error: str) -> dict[str, object]:
    return {"tool": tool, "ok": False, "text": f"Error: {error}", "error": error, "data": None}


def _step(
    agent: RuntimeRulesAgent, cell: str, tool_result: dict[str, object] | None = None, tools_left: int = 5
) -> object:
    info = {"sample_id": "s", "task": "output", "tool_names": TOOLS, "tool_result": tool_result}
    history = "# In [1]:\nimport pandas as pd\n\n# In [2]:\n1 + 1\n# Out [2]:\n2\n"
    obs = {"history": history, "cell": cell, "runtime": "", "tool_result": "", "tools_left": tools_left}
    return agent.act(obs, info)


def test_an_undefined_name_predicts_a_name_error() -> None:
    agent = RuntimeRulesAgent()
    agent.reset({})
    assert _step(agent, "pd.concat([df, extra])") == ToolCall(tool="list_variables")
    # df is listed, pd was imported in the history: only extra is asked about
    assert _step(agent, "", LISTING, 4) == ToolCall(tool="inspect_variable", args={"name": "extra", "max_chars": 4000})
    no_such = _failed("inspect_variable", "no variable named 'extra' in the kernel. Did you mean n?")
    assert _step(agent, "", no_such, 3) == Prediction(text="NameError: name 'extra' is not defined")
    assert agent.answered_by_tools == 1


def test_a_missing_column_predicts_a_key_error() -> None:
    agent = RuntimeRulesAgent()
    agent.reset({})
    assert _step(agent, "y = df.pop('target')") == ToolCall(tool="list_variables")
    assert _step(agent, "", LISTING, 4) == ToolCall(tool="dataframe_info", args={"name": "df"})
    view = {"name": "df", "view": "info", "text": "<class 'pandas.DataFrame'>\n...", "dtypes": {"a": "int64"}}
    info = {
        "tool": "dataframe_info",
        "ok": True,
        "error": None,
        "data": {**view, "dtypes": {**view["dtypes"], "b b": "float64"}},
    }
    assert _step(agent, "", info, 3) == Prediction(text="KeyError: 'target'")


def test_a_tool_error_falls_back_to_the_static_baseline() -> None:
    agent = RuntimeRulesAgent(fallback="repeat-previous")
    agent.reset({})
    assert _step(agent, "n.head()") == ToolCall(tool="list_variables")
    assert _step(agent, "", LISTING, 4) == ToolCall(tool="dataframe_head", args={"name": "n", "n": 5})
    not_a_frame = _failed("dataframe_head", "'n' is a int, not a pandas DataFrame or Series.")
    assert _step(agent, "", not_a_frame, 3) == Prediction(text="2")
    assert agent.answered_by_tools == 0


def test_the_display_rule_keeps_a_tool_call_for_itself() -> None:
    agent = RuntimeRulesAgent()
    agent.reset({})
    # two tools left: one for list_variables, one kept for the display; the unlisted names are not checked
    assert _step(agent, "print(a, b, c)\ndf.shape", tools_left=2) == ToolCall(tool="list_variables")
    assert _step(agent, "", LISTING, 1) == ToolCall(tool="inspect_variable", args={"name": "df", "max_chars": 4000})


def test_runtime_rules_beats_the_static_baselines_on_output_prediction(make_env: MakeEnv) -> None:
    env = make_env("output", "tools")
    rules = run_agent(env, make_agent("runtime-rules"))
    repeat = run_agent(env, make_agent("repeat-previous"))
    retrieval = run_agent(env, make_agent("retrieval"))
    assert [r.sample_id for r in rules] == [r.sample_id for r in repeat] == [r.sample_id for r in retrieval]
    assert all(0.0 <= v <= 1.0 for r in rules for v in r.scores.values())
    used_tools = [r for r in rules if r.tool_calls]
    assert len(used_tools) >= len(rules) // 2
    assert all(r.usage.tool_calls == len(r.tool_calls) for r in rules)
    assert {call["tool"] for r in used_tools for call in r.tool_calls} >= {
        "inspect_variable",
        "dataframe_head",
        "dataframe_describe",
        "dataframe_info",
    }
    assert mean(rules, "rouge_l") > mean(repeat, "rouge_l") + 0.3
    assert mean(rules, "rouge_l") > mean(retrieval, "rouge_l") + 0.3
    assert mean(rules, "exact_match") > 0.5
    by_id = {r.sample_id: r for r in rules}
    assert by_id["k-frames-kframes/output/2"].prediction == "(40, 3)"  # df.shape
    assert by_id["k-frames-kframes/output/12"].prediction == "numpy.float64"  # type(total)
    assert by_id["k-frames-kframes/output/16"].prediction == "((5, 4), 40)"  # small.shape, len(df)
    assert by_id["k-frames-kframes/output/16"].scores["exact_match"] == 1.0
    assert by_id["k-frames-kframes/output/17"].prediction == "KeyError: 'e'"  # df['e'].sum()
    assert by_id["k-values-kvalues/output/4"].prediction == "NameError: name 'statistics' is not defined"
    assert by_id["k-values-kvalues/output/4"].scores["exact_match"] == 1.0


def test_runtime_rules_looks_at_a_new_variable_on_next_cell_prediction(make_env: MakeEnv) -> None:
    env = make_env("next-cell", "tools")
    results = {r.sample_id: r for r in run_agent(env, make_agent("runtime-rules"))}
    after_df = results["k-frames-kframes/next-cell/2"]  # the cell before assigned df and showed nothing
    assert [c["tool"] for c in after_df.tool_calls] == ["list_variables"]
    assert after_df.prediction == "df.head()"
    after_best = results["k-values-kvalues/next-cell/3"]  # best = max(scores)
    assert after_best.prediction == "best" and after_best.scores["exact_match"] == 1.0
