"""One tool table: no tool's name is spelled in the package but where the tools are defined.

The env's tools (`themisto_env.env.tools.TOOLS`) and the bridges' `SUBMIT` are the one definition of each
tool's name, arguments and description; the TRL tool env, the verifiers taskset, the OpenEnv example, the
inspect task and the env itself derive theirs from it. Read from the sources of `themisto_env/` with `ast`:
a string constant that is a tool's name, or a function named as a tool, outside the table's home is a tool
restated by hand. Prose (docstrings and comments naming a tool among other words) is not a definition and
is not read. `agents/` (the agents call tools by name: they use the table, they do not define tools) and
`sandbox/` (the kernel's introspection methods, which the tools call, share some names) are not the
package's tool definitions and are not read either.
"""

from __future__ import annotations

import ast
from pathlib import Path

from themisto_env.env.tools import SUBMIT, TOOL_NAMES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "themisto_env"
#: The table's home: the tools' definitions (`_observations.py`) and `try_cell`'s function, defined beside
#: its arguments and its refusal (`_try.py`).
HOME = {PACKAGE / "env" / "tools" / "_observations.py", PACKAGE / "env" / "tools" / "_try.py"}
NAMES = frozenset({*TOOL_NAMES, SUBMIT.name})


def spelled(source: str, names: frozenset[str] = NAMES) -> list[tuple[int, str]]:
    """Where ``source`` spells a tool's name: a string constant equal to it, or a function defined under it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
            found.append((node.lineno, f"def {node.name}"))
    return found


def test_no_tool_name_is_spelled_outside_the_table() -> None:
    sources = sorted(path for path in PACKAGE.rglob("*.py") if path not in HOME)
    assert len(sources) > 100, "the package's sources were not found"
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sources
        for line, what in spelled(path.read_text(encoding="utf-8"))
    ]
    assert not wrong, "tools restated outside the tool table:\n" + "\n".join(wrong)


def test_the_table_home_defines_every_tool() -> None:
    """The allowance is where the names are: each tool's name is spelled in the home."""
    at_home = {what.removeprefix("def ").strip("'") for path in HOME for _, what in spelled(path.read_text())}
    assert at_home >= NAMES


def test_the_check_finds_a_restated_tool() -> None:
    """What the check reads: a literal name, a method named as a tool; not prose, not another name."""
    source = '''
class Rollout:
    """Calls list_variables, then submit."""

    def submit(self, prediction: str) -> str:
        return self._tool("list_variables")

    def list_variables_twice(self) -> str:
        return "list_variables is a tool"
'''
    assert sorted(spelled(source)) == [(5, "def submit"), (6, "'list_variables'")]
