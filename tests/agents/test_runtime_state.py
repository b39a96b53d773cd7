"""runtime-state's rules on texts: the runtime dump read back, print of answerable expressions, the fix of a
failed lookup; and that it is one agent for every mode."""

from __future__ import annotations

from themisto_env.agents import make_agent
from themisto_env.agents.displayed import displayed_expression
from themisto_env.agents.runtime_dump import dump_answer, read_dump
from themisto_env.agents.runtime_repair import failed_lookup, fixed_cell, nearest
from themisto_env.agents.runtime_state import dump_next_cell, dump_output, printed_expressions, printed_text
from themisto_env.env.actions import Prediction

DUMP = "\n".join(
    [
        "Kernel memory: 1,000 bytes; variables: 100 bytes",
        "df: pandas.DataFrame shape=(150, 4) (9,000 bytes) =    a  b 0  1  2",
        "n: int (28 bytes) = 42",
        "name: str (50 bytes) = 'iris'",
        "xs: list (120 bytes) = [1, 2, 3]",
    ]
)


def test_the_dump_answers_what_it_holds() -> None:
    variables = read_dump(DUMP)
    assert set(variables) == {"df", "n", "name", "xs"}
    assert not variables["df"].whole and variables["n"].whole
    assert dump_output({"cell": "df.shape", "runtime": DUMP}) == "(150, 4)"
    assert dump_output({"cell": "len(xs)", "runtime": DUMP}) == "3"
    assert dump_output({"cell": "n", "runtime": DUMP}) == "42"
    assert dump_output({"cell": "print(name, n)", "runtime": DUMP}) == "iris 42"
    assert dump_output({"cell": "df", "runtime": DUMP}) is None, "a frame's repr is cut to a line: not answered"
    assert dump_output({"cell": "df.head()", "runtime": DUMP}) is None
    assert dump_output({"cell": "n = 3\nn", "runtime": DUMP}) is None, "the cell changes n first"
    variables_only = read_dump(DUMP)
    expr = displayed_expression("df.shape, len(xs)")
    assert expr is not None and dump_answer(expr, variables_only) == "((150, 4), 3)"


def test_print_rules() -> None:
    assert [e.kind for e in printed_expressions("print(df.shape, len(xs))") or []] == ["shape", "len"]
    assert printed_expressions("print(df.shape, sep='')") is None
    assert printed_expressions("print(df.groupby('a').sum())") is None
    assert printed_text("'hi'") == "hi" and printed_text("array([1, 2])") is None and printed_text("(1, 2)") == "(1, 2)"


def test_a_failed_lookup_is_fixed_with_the_nearest_name_the_state_defines() -> None:
    assert failed_lookup("KeyError: 'Store'") == ("key", ["Store"])
    assert failed_lookup("NameError: name 'dff' is not defined") == ("name", ["dff"])
    assert failed_lookup("KeyError: 'Column not found: colour'") == ("key", ["colour"])
    assert nearest("Store", {"store", "units"}) == "store" and nearest("zzz", {"store"}) is None
    assert fixed_cell("m = a.merge(b, on='Store')", "key", ["Store"], {"store"}) == "m = a.merge(b, on='store')"
    assert fixed_cell("dff.head()", "name", ["dff"], {"df"}) == "df.head()"
    history = "# In [1]:\ndff.head()\n# Out [1]:\nNameError: name 'dff' is not defined\n"
    dumped = "df: pandas.DataFrame shape=(1, 1) (10 bytes) = a 0 1"
    assert dump_next_cell({"history": history, "runtime": dumped}) == "df.head()"


def test_one_agent_for_every_mode() -> None:
    agent = make_agent("runtime-state")
    assert agent.observation is None
    agent.reset({"observation_mode": "full"})
    info = {"sample_id": "s", "task": "output", "observation_mode": "full", "tool_names": ()}
    assert agent.act({"cell": "df.shape", "runtime": DUMP, "history": ""}, info) == Prediction(text="(150, 4)")
    static = {**info, "sample_id": "t", "observation_mode": "static"}
    assert agent.act({"cell": "df.shape", "runtime": "", "history": ""}, static) == Prediction(text="")
