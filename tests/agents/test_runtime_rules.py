"""runtime-rules: which cells it answers from the kernel, and that tool-queried context beats static context."""

from __future__ import annotations

import pytest
from themisto_env.agents import make_agent
from themisto_env.agents.runtime_rules import DisplayedExpression, RuntimeRulesAgent, displayed_expression

from tests.agents.conftest import MakeEnv
from tests.agents.episodes import mean, run_agent
from themisto_env.actions import Prediction
from themisto_env.tools import ToolCall

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


def test_a_tool_error_falls_back_to_the_static_baseline() -> None:
    agent = RuntimeRulesAgent(fallback="repeat-previous")
    info = {"sample_id": "s", "task": "output", "tool_names": ("inspect_variable",)}
    obs = {
        "history": "# In [1]:\n1 + 1\n# Out [1]:\n2\n",
        "cell": "x",
        "runtime": "",
        "tool_result": "",
        "tools_left": 3,
    }
    agent.reset(info)
    assert agent.act(obs, info) == ToolCall(tool="inspect_variable", args={"name": "x", "max_chars": 4000})
    answer = agent.act({**obs, "tool_result": "Error: no variable named 'x' in the kernel.", "tools_left": 2}, info)
    assert answer == Prediction(text="2")
    assert agent.answered_by_tools == 0


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


def test_runtime_rules_looks_at_a_new_variable_on_next_cell_prediction(make_env: MakeEnv) -> None:
    env = make_env("next-cell", "tools")
    results = {r.sample_id: r for r in run_agent(env, make_agent("runtime-rules"))}
    after_df = results["k-frames-kframes/next-cell/2"]  # the cell before assigned df and showed nothing
    assert [c["tool"] for c in after_df.tool_calls] == ["list_variables"]
    assert after_df.prediction == "df.head()"
    after_best = results["k-values-kvalues/next-cell/3"]  # best = max(scores)
    assert after_best.prediction == "best" and after_best.scores["exact_match"] == 1.0
