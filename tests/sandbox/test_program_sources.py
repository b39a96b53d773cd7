"""The in-kernel programs (the helper, the template's program) are written in parts and sent whole: one source
each, built by one function, complete (every name a function loads is defined in it), importing nothing of
themisto_env; and every kernel, started or forked, gets exactly that source.

The assembled sources are read with ``ast`` and ``dis`` and run with ``exec`` (no kernel); the last tests start
real kernels.
"""

from __future__ import annotations

import ast
import builtins
import dis
import hashlib
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from themisto_env.errors import InfrastructureError
from themisto_env.sandbox.kernel.core import Kernel
from themisto_env.sandbox.kernel.helper import helper_source
from themisto_env.sandbox.kernel.helper._source import PARTS as HELPER_PARTS
from themisto_env.sandbox.kernel.sources import assemble
from themisto_env.sandbox.template.core import KernelTemplate
from themisto_env.sandbox.template.zygote import PARTS as PROGRAM_PARTS
from themisto_env.sandbox.template.zygote import program_source

SOURCES = {"helper": (helper_source, "themisto_env.sandbox.kernel.helper", HELPER_PARTS)}
SOURCES["program"] = (program_source, "themisto_env.sandbox.template.zygote", PROGRAM_PARTS)


def _run(source: str) -> dict[str, Any]:
    """The namespace the source makes as a module run by path (not as ``__main__``: the program defines, never
    starts)."""
    namespace: dict[str, Any] = {"__name__": "_themisto_probe", "__file__": "/run/zygote.py"}  # run by path
    exec(compile(source, "<assembled>", "exec"), namespace)
    return namespace


def _codes(namespace: dict[str, Any]) -> Iterator[types.CodeType]:
    """Every code object of the namespace's functions and classes' methods, nested ones included."""
    pending: list[types.CodeType] = []
    for value in namespace.values():
        if isinstance(value, types.FunctionType):
            pending.append(value.__code__)
        elif isinstance(value, type) and value.__module__ == namespace["__name__"]:
            for member in vars(value).values():
                function = getattr(member, "__func__", member)
                if isinstance(function, types.FunctionType):
                    pending.append(function.__code__)
    while pending:
        code = pending.pop()
        yield code
        pending.extend(const for const in code.co_consts if isinstance(const, types.CodeType))


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_name_a_function_loads_is_defined_in_the_one_source(name: str) -> None:
    """A part that uses a name no part defines (or whose import of another part was dropped with nothing
    behind it) fails here, not in a kernel."""
    source, _, _ = SOURCES[name]
    namespace = _run(source())
    missing = {
        f"{code.co_name}: {instruction.argval}"
        for code in _codes(namespace)
        for instruction in dis.get_instructions(code)
        if instruction.opname == "LOAD_GLOBAL"
        and instruction.argval not in namespace
        and not hasattr(builtins, instruction.argval)
    }
    assert not missing, sorted(missing)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_one_source_holds_every_part_and_imports_nothing_of_the_package(name: str) -> None:
    source, package, parts = SOURCES[name]
    text = source()
    tree = ast.parse(text)
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [module for module in imported if module and module.startswith("themisto_env")]
    assert ast.get_docstring(tree, clean=False) == sys.modules[package].__doc__  # the package's is the program's
    namespace = _run(text)
    for part in parts:
        module = sys.modules.get(f"{package}.{part}") or __import__(f"{package}.{part}", fromlist=["_"])
        defined = {
            name
            for name, value in vars(module).items()
            if getattr(value, "__module__", module.__name__) == module.__name__
            and not isinstance(value, types.ModuleType)
            and not (name.startswith("__") and name.endswith("__"))
        }
        assert defined <= set(namespace), (part, sorted(defined - set(namespace)))


def test_the_helper_binds_only_the_standard_modules_its_sealed_copies_freeze() -> None:
    """``seal`` replaces the standard modules the helper binds (``_STANDARD_MODULES``) by snapshots, so that a
    cell rebinding ``hashlib.sha1`` cannot reach a sealed copy: a part binding another module at its top level
    would leave that module live in every sealed copy."""
    namespace = _run(helper_source())
    bound = {name for name, value in namespace.items() if isinstance(value, types.ModuleType)}
    assert bound == set(namespace["_STANDARD_MODULES"])


def test_the_program_runs_main_only_as_a_program() -> None:
    text = program_source()
    last = ast.parse(text).body[-1]
    assert isinstance(last, ast.If) and ast.unparse(last.test) == "__name__ == '__main__'"
    assert callable(_run(text)["main"])


def test_the_host_and_the_program_name_the_isolation_variable_alike() -> None:
    """The host sets the variable a bwrap template's copies read to isolate themselves: one name on both sides
    (a mismatch would leave every copy unisolated, silently)."""
    from themisto_env.sandbox.template.zygote import ISOLATE_VARIABLE

    assert _run(program_source())["ISOLATE_VARIABLE"] == ISOLATE_VARIABLE


def _package(root: Path, parts: dict[str, str]) -> str:
    """A package of parts under ``root`` (on sys.path), named for the test."""
    name = f"parts_{root.name.replace('-', '_')}"
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text('"""A program in parts."""\n')
    for part, text in parts.items():
        (folder / f"{part}.py").write_text(text)
    return name


def test_a_part_importing_a_later_part_or_the_package_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    first = "from __future__ import annotations\n\nA = 1\n"
    package = _package(tmp_path, {"_a": first, "_b": "from __future__ import annotations\n\nB = 2\n"})
    early = f"from __future__ import annotations\n\nfrom {package}._b import B\n\nA = B\n"
    (tmp_path / package / "_a.py").write_text(early)
    with pytest.raises(InfrastructureError, match="not a part before it"):
        assemble(package, ("_a", "_b"))
    (tmp_path / package / "_a.py").write_text("from themisto_env.errors import ThemistoError\n")
    with pytest.raises(InfrastructureError, match="the kernel may not have it"):
        assemble(package, ("_a", "_b"))


def test_parts_join_with_one_future_import_and_without_their_own_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    package = _package(tmp_path, {"_a": '"""Part a."""\n\nfrom __future__ import annotations\n\nA = 1\n'})
    (tmp_path / package / "_b.py").write_text(
        f'"""Part b."""\n\nfrom __future__ import annotations\n\nfrom {package}._a import (\n    A,\n)\n\nB = A + 1\n'
    )
    text = assemble(package, ("_a", "_b"))
    assert text.count("from __future__ import annotations") == 1
    assert ast.get_docstring(ast.parse(text)) == "A program in parts."
    assert package not in text.replace('"""A program in parts."""', "")
    assert _run(text)["B"] == 2


# -- what kernels get --------------------------------------------------------------------------------------

HELPER_DIGEST = (
    "import hashlib, sys; print(hashlib.sha256(sys.modules['_themisto_helper'].SOURCE.encode()).hexdigest())"
)
SYS_PATH = "import json, sys; print(json.dumps(sys.path))"


def _printed(kernel: Any, code: str) -> str:
    result = kernel.execute(code)
    assert result.status == "ok", result
    return "".join(o.get("text", "") for o in result.outputs).strip()


@pytest.mark.slow
def test_started_and_forked_kernels_get_the_one_helper_source_and_the_same_imports(tmp_path: Path) -> None:
    """The helper a started kernel installs and the one a forked kernel inherits from its template are the
    one source; a forked kernel's ``sys.path`` is a started kernel's (the template's run directory, where
    its program and the helper are, is not on it)."""
    expected = hashlib.sha256(helper_source().encode()).hexdigest()
    with Kernel("local", snapshot_dir=tmp_path / "store") as started:
        assert _printed(started, HELPER_DIGEST) == expected
        started_path = json.loads(_printed(started, SYS_PATH))
    with KernelTemplate("local", snapshot_dir=tmp_path / "store") as template:
        forked = template.kernel()
        try:
            assert _printed(forked, HELPER_DIGEST) == expected
            forked_path = json.loads(_printed(forked, SYS_PATH))
            assert str(template.run_dir) not in forked_path
            assert forked_path == started_path
            assert "No module named 'helper'" in str(forked.execute("import helper").outputs)
            assert (template.run_dir / "zygote.py").read_text().startswith('"""The kernel template')
        finally:
            forked.close()
