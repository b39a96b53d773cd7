"""Every parse of Python source in the host's code goes through `themisto_env.syntax.parse` (one thread at a
time: CPython 3.11's gh-106905 makes concurrent `ast.parse` calls raise `SystemError` now and then, seen under
`themisto serve`'s load test). The in-kernel programs (the helper, the template) run in a kernel's own
single-threaded process and are left out."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from themisto_env.sandbox.kernel.helper._source import PARTS as HELPER_PARTS
from themisto_env.sandbox.template.zygote import PARTS as PROGRAM_PARTS
from themisto_env.syntax import parse

ROOT = Path(__file__).resolve().parents[1]
#: The in-kernel programs' parts (their packages' other modules are host code) and the one home of parse.
IN_KERNEL = {
    *(f"sandbox/kernel/helper/{part}.py" for part in HELPER_PARTS),
    *(f"sandbox/template/zygote/{part}.py" for part in PROGRAM_PARTS),
    "themisto_env/syntax.py",
}


def _ast_parse_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "parse"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "ast"
    ]


def test_no_host_module_calls_ast_parse_directly() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("themisto_env", "agents", "sandbox")
        for path in (ROOT / folder).rglob("*.py")
        if str(path.relative_to(ROOT)) not in IN_KERNEL
        for line in _ast_parse_calls(path)
    }
    assert not found, f"use themisto_env.syntax.parse: {sorted(found)}"


def test_parse_from_many_threads_gives_each_its_own_tree() -> None:
    sources = [f"x{i} = [f(a, b[c], {{d: {i}}}) for a in range({i})]" for i in range(8)]
    trees: dict[int, str] = {}

    def work(i: int) -> None:
        for _ in range(50):
            trees[i] = ast.dump(parse(sources[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert trees == {i: ast.dump(ast.parse(source)) for i, source in enumerate(sources)}
