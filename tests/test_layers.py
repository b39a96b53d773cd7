"""The package's layers: imports go one way, and no module reaches into another module's private names.

The direction (cli | bridges | run -> agents -> env -> scoring -> replay -> build -> data -> sandbox, with errors,
redaction and metrics as leaves) is stated as import-linter contracts in pyproject.toml and checked by
``scripts/lint_imports.py``. Private reaches are checked here by parsing every module: ``from X import
_name``, ``import X._mod`` and ``X._name`` are allowed only inside the package that owns ``_name``
(``metrics/__init__.py`` may import ``metrics/_chrf.py``; ``bridges/rl/export.py`` may not import
``env.core._text``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import themisto_env
import themisto_env.agents
import themisto_env.sandbox

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {
    "themisto_env": Path(themisto_env.__file__).parent,
    "themisto_env.agents": Path(themisto_env.agents.__file__).parent,
    "themisto_env.sandbox": Path(themisto_env.sandbox.__file__).parent,
}


FOREIGN_PRIVATE = {
    # (module, attribute): private names of other libraries' objects, used knowingly
    ("themisto_env.agents.cache", "_get_invocation_params"): "langchain-core's model parameters (the cache key)",
    ("themisto_env.tracing", "_TRACER_PROVIDER"): "OpenTelemetry's global provider, read without the api's lookup",
    ("themisto_env.sandbox.template.zygote._app", "_trait_values"): "traitlets' built values: a table made lazy again",
}


def iter_modules() -> Iterator[tuple[str, Path]]:
    """Every module of the installed package: (dotted name, file); a package's name for its __init__."""
    for root_name, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[0] in ("agents", "sandbox") and root_name == "themisto_env":
                continue  # not part of themisto_env's folder in the installed shape
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join([root_name, *parts]), path


def is_package(path: Path) -> bool:
    """Whether the file is a package's __init__."""
    return path.name == "__init__.py"


def private_owner(target: str) -> str | None:
    """The module (or object) that owns the first private name of a dotted path, or None if all public.

    ``themisto_env.env.core._text`` -> ``themisto_env.env.core``; ``themisto_env.metrics._chrf.chrf`` ->
    ``themisto_env.metrics``.
    """
    parts = target.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return ".".join(parts[:index])
    return None


def may_reach(module: str, owner: str) -> bool:
    """Whether ``module`` may use a private name of ``owner``: only from inside the owner's package."""
    return module == owner or module.startswith(owner + ".")


def absolute(module: str, package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if package else module.split(".")[:-1]
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"], or None when the expression is not a plain name chain."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def private_reaches(module: str, path: Path) -> list[str]:
    """The private names of other themisto_env modules a module file uses, as ``file:line: target``."""
    source = path.read_text(encoding="utf-8")
    return [f"{path.relative_to(REPO)}:{reach}" for reach in source_reaches(module, source, is_package(path))]


def source_reaches(module: str, source: str, package: bool = False) -> list[str]:
    """The private names of other themisto_env modules a module's source uses, as ``line: target``.

    Args:
        module: The module's dotted name (the package's name for an ``__init__``).
        source: Its source text.
        package: Whether it is a package's ``__init__`` (for relative imports).
    """
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the themisto_env module or object it stands for
    found: list[str] = []

    def check(target: str, line: int) -> None:
        owner = private_owner(target)
        if target.startswith("themisto_env") and owner is not None and not may_reach(module, owner):
            found.append(f"{line}: {target}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, node.lineno)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            origin = absolute(module, package, node)
            for alias in node.names:
                target = f"{origin}.{alias.name}"
                check(target, node.lineno)
                bound[alias.asname or alias.name] = target
    own = defined_private_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = dotted(node)
        if chain and chain[0] in bound:
            check(".".join([bound[chain[0]], *chain[1:]]), node.lineno)
        elif (
            is_private(node.attr)
            and node.attr not in own
            and (chain is None or chain[0] not in ("self", "cls"))
            and (module, node.attr) not in FOREIGN_PRIVATE
        ):  # an object's private attribute that this module does not define: another module's
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(found), key=lambda reach: (int(reach.split(":")[0]), reach))


def is_private(name: str) -> bool:
    """``_name`` (not a dunder)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines itself: functions, classes, attributes and variables it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if is_private(name)}


def test_every_module_is_found() -> None:
    """The scan sees the library, agents and sandbox (a wrong root would make the next test pass vacuously)."""
    names = {name for name, _ in iter_modules()}
    assert {"themisto_env.env.core", "themisto_env.agents.base", "themisto_env.sandbox.kernel.core"} <= names
    assert len(names) > 80


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """``from X import _name`` / ``X._name`` only inside the package that owns ``_name``."""
    reaches = [reach for name, path in iter_modules() for reach in private_reaches(name, path)]
    assert reaches == [], "private names used outside their package:\n" + "\n".join(reaches)


def test_the_private_reach_rule() -> None:
    """The rule itself: a package's own private submodules are fine, another module's private names are not."""
    assert may_reach("themisto_env.metrics", private_owner("themisto_env.metrics._chrf.chrf") or "")
    assert may_reach("themisto_env.metrics._sample", "themisto_env.metrics")
    assert private_owner("themisto_env.env.core._text") == "themisto_env.env.core"
    assert not may_reach("themisto_env.bridges.rl.export", "themisto_env.env.core")
    assert private_owner("themisto_env.env.core.ThemistoEnv.__init__") is None


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import importlinter"], capture_output=True).returncode != 0,
    reason="import-linter is not installed (pip install -e '.[dev]')",
)
def test_import_contracts_are_kept() -> None:
    """``lint-imports`` (through scripts/lint_imports.py) keeps every contract of pyproject.toml."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lint_imports.py")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_rule_catches_each_kind_of_reach() -> None:
    """Imports of private names, private attributes of imported modules and of other modules' objects."""
    reaching = """
import themisto_env.sandbox.image as kernel_image
from themisto_env.env.core import _text, ThemistoEnv
from themisto_env.env import core

def f(env: ThemistoEnv) -> None:
    kernel_image._locked(1)
    core._text("a", 1)
    ThemistoEnv._reset_state(env)
    env._code_timeout_s
"""
    assert source_reaches("themisto_env.bridges.rl.export", reaching) == [
        "3: themisto_env.env.core._text",
        "7: themisto_env.sandbox.image._locked",
        "8: themisto_env.env.core._text",
        "9: themisto_env.env.core.ThemistoEnv._reset_state",
        "10: env._code_timeout_s",
    ]
    own = """
from themisto_env.metrics._chrf import chrf
from ._rouge import rouge_l
import pandas as pd

class Pool:
    _holders = 0

def f(pool: Pool, value: object) -> None:
    pool._holders += 1
    pd._config
    value.__class__
"""
    assert source_reaches("themisto_env.metrics", own, package=True) == []


def test_every_package_is_in_the_wheel() -> None:
    """Every folder of the library with an ``__init__.py`` is listed in pyproject.toml's packages (a package
    left out is missing from a wheel install, though an editable install finds it)."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    roots = {"themisto_env": REPO / "themisto_env", "themisto_env.agents": REPO / "agents"}
    roots["themisto_env.sandbox"] = REPO / "sandbox"
    found = {
        ".".join((prefix, *init.parent.relative_to(root).parts))
        for prefix, root in roots.items()
        for init in root.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
