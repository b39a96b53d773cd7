"""The package's layers: imports go one way, and no module reaches into another module's private names.

The direction (cli | bridges | run -> agents -> env -> scoring -> replay -> build -> data -> sandbox, with errors,
redaction and metrics as leaves) is stated as import-linter contracts in pyproject.toml and checked by
``scripts/lint_imports.py``. Private reaches are checked here by parsing every module: ``from X import
_name``, ``import X._mod``, ``X._name`` and ``getattr(X, "_name")`` are allowed only inside the package that
owns ``_name`` (``metrics/__init__.py`` may import ``metrics/_chrf.py``; ``bridges/rl/export.py`` may not import
``env.core._text``). Other libraries' private names (through an imported name, a ``sys.modules`` lookup, or an
object's attribute this module does not define) and patches of the Jupyter stack are allowed only in the
compatibility modules below: at most 2 for the Jupyter stack, at most 5 for the other libraries.
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


#: The Jupyter stack: its private names and patches only in `JUPYTER_COMPAT`.
JUPYTER_STACK = ("ipykernel", "IPython", "traitlets", "jupyter_client", "jupyter_core", "zmq")
#: The modules that may use the Jupyter stack's private names and patch it (at most 2).
JUPYTER_COMPAT = {
    "themisto_env.sandbox.compat.jupyter": "the host's: jupyter_core's thread loop, jupyter_client's channels",
    "themisto_env.sandbox.compat.in_kernel": "the kernel's: ipykernel's and IPython's, in the helper and template",
}
#: The modules that may use other libraries' private names (at most 5).
FOREIGN_COMPAT = {
    "themisto_env.sandbox.compat.in_kernel": "dill's, pandas', numpy's and the standard library's, in the kernel",
    "themisto_env.agents.cache": "langchain-core's model parameters (the cache key)",
    "themisto_env.tracing": "OpenTelemetry's global provider, read without the api's lookup",
    "themisto_env.bridges.inspect_task": "inspect_ai's PrerequisiteError (print the message, not a traceback)",
    "themisto_env.sandbox.engine": "docker-py's adapter (the engine's socket path)",
}
#: Names with a leading underscore that their library documents as public.
PUBLIC_UNDERSCORED = frozenset({"os._exit", "sys._getframe"})
#: The built-ins that reach an attribute by name: ``getattr(x, "_name")`` is a reach of ``x._name``.
BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr"})


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
    """The private names a module's source uses and may not, as ``line: target``: those of other themisto_env
    modules, and outside the compatibility modules those of other libraries (see `classified_reaches`).

    Args:
        module: The module's dotted name (the package's name for an ``__init__``).
        source: Its source text.
        package: Whether it is a package's ``__init__`` (for relative imports).
    """
    found = [f"{line}: {target}" for line, target, kind in classified_reaches(module, source, package)]
    allowed = [may_use(module, kind) for _, _, kind in classified_reaches(module, source, package)]
    kept = {reach for reach, ok in zip(found, allowed, strict=True) if not ok}
    return sorted(kept, key=lambda reach: (int(reach.split(":")[0]), reach))


def may_use(module: str, kind: str) -> bool:
    """Whether ``module`` may make a reach of that kind (themisto_env's own reaches are never allowed here:
    `classified_reaches` leaves out those from inside the owner's package)."""
    if kind in ("jupyter", "patch"):
        return module in JUPYTER_COMPAT
    if kind == "foreign":
        return module in FOREIGN_COMPAT
    if kind == "object":  # whose, the source cannot say
        return module in JUPYTER_COMPAT or module in FOREIGN_COMPAT
    return False


def classified_reaches(module: str, source: str, package: bool = False) -> list[tuple[int, str, str]]:
    """Every private reach of a module's source, as (line, target, kind); kind: ``themisto`` (another
    themisto_env module's), ``jupyter`` (the Jupyter stack's), ``foreign`` (another library's), ``object`` (an
    attribute of an object this module does not define, whoever's it is) or ``patch`` (an assignment to an
    attribute of the Jupyter stack).

    A name stands for what the module bound it to: an import, or ``sys.modules.get("x")`` / ``sys.modules["x"]``.
    ``getattr`` / ``setattr`` / ``hasattr`` / ``delattr`` with a string (an f-string: its start) reach that
    attribute. Attributes of ``self`` and ``cls``, and those this module defines, are its own.
    """
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the module or object it stands for
    found: list[tuple[int, str, str]] = []

    def reach(target: str, line: int) -> None:
        owner = private_owner(target)
        if owner is None or target in PUBLIC_UNDERSCORED:
            return
        if target.startswith("themisto_env"):
            if not may_reach(module, owner):
                found.append((line, target, "themisto"))
        elif target.split(".")[0] != "__future__":
            found.append((line, target, "jupyter" if target.split(".")[0] in JUPYTER_STACK else "foreign"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                reach(alias.name, node.lineno)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            origin = absolute(module, package, node)
            for alias in node.names:
                target = f"{origin}.{alias.name}"
                reach(target, node.lineno)
                bound[alias.asname or alias.name] = target
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            looked_up = module_lookup(node.value)
            if looked_up:
                bound[node.targets[0].id] = looked_up
    own = defined_private_names(tree)

    def attribute(base: ast.expr, name: str, line: int, text: str) -> None:
        chain = dotted(base)
        if chain and chain[0] in bound:
            reach(".".join([bound[chain[0]], *chain[1:], name]), line)
        elif is_private(name) and name not in own and (chain is None or chain[0] not in ("self", "cls")):
            found.append((line, text, "object"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            attribute(node.value, node.attr, node.lineno, ast.unparse(node))
            chain = dotted(node)
            stored = isinstance(node.ctx, ast.Store | ast.Del)
            if stored and chain and chain[0] in bound and bound[chain[0]].split(".")[0] in JUPYTER_STACK:
                found.append((node.lineno, ".".join([bound[chain[0]], *chain[1:]]), "patch"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BY_NAME:
            name = literal_name(node.args[1]) if len(node.args) >= 2 else None
            if name is not None and is_private(name):
                attribute(node.args[0], name, node.lineno, f"{node.func.id}({ast.unparse(node.args[0])}, {name!r})")
    return sorted(set(found))


def module_lookup(value: ast.expr) -> str | None:
    """The module name of ``sys.modules.get("name", ...)`` or ``sys.modules["name"]``, else None."""
    if isinstance(value, ast.Call) and dotted(value.func) == ["sys", "modules", "get"] and value.args:
        key: ast.expr = value.args[0]
    elif isinstance(value, ast.Subscript) and dotted(value.value) == ["sys", "modules"]:
        key = value.slice
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def literal_name(node: ast.expr) -> str | None:
    """The attribute name a ``getattr``-like call is given: a string, or an f-string's start (``f"_{x}_channel"``:
    ``_..._channel``, private if the string is), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return f"{node.values[0].value}..."
    return None


def is_private(name: str) -> bool:
    """``_name`` (not a dunder)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines itself: functions, classes, variables it assigns, and attributes it
    sets on ``self`` or ``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)  # set on another object, it is that object's (``kernel._modules = ...``)
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
    getattr(pool, "_holders")
    pd.DataFrame
    value.__class__
"""
    assert source_reaches("themisto_env.metrics", own, package=True) == []


FOREIGN = """
import os
import sys
import jupyter_core.utils
import traitlets as t
from ipykernel import kernelapp
from inspect_ai._util.error import PrerequisiteError

def f(formatter, client, name, pd):
    jupyter_core.utils._loop
    t.config._x
    kernelapp.IPKernelApp._instance
    formatter._trait_values.pop("a")
    getattr(client, f"_{name}_channel")
    hasattr(client, "_shell_channel")
    compiler = sys.modules.get("ipykernel.compiler")
    compiler.get_tmp_directory = lambda: "/tmp"
    dill_module = sys.modules["dill._dill"]
    dill_module._main_module = None
    kernelapp.IPKernelApp.kernel_class = None
    os._exit(0)
"""


def test_the_rule_sees_other_libraries_private_names_and_patches() -> None:
    """Through imported names and ``sys.modules`` lookups, by ``getattr`` and friends with a string, attributes
    read or set on objects; patches of the Jupyter stack. Documented ones (``os._exit``) are public."""
    assert classified_reaches("themisto_env.sandbox.kernel.process", FOREIGN) == [
        (7, "inspect_ai._util.error.PrerequisiteError", "foreign"),
        (10, "jupyter_core.utils._loop", "jupyter"),
        (11, "traitlets.config._x", "jupyter"),
        (12, "ipykernel.kernelapp.IPKernelApp._instance", "jupyter"),
        (13, "formatter._trait_values", "object"),
        (14, "getattr(client, '_...')", "object"),
        (15, "hasattr(client, '_shell_channel')", "object"),
        (17, "ipykernel.compiler.get_tmp_directory", "patch"),
        (19, "dill._dill._main_module", "foreign"),
        (20, "ipykernel.kernelapp.IPKernelApp.kernel_class", "patch"),
    ]
    assert len(source_reaches("themisto_env.sandbox.kernel.process", FOREIGN)) == 10
    assert source_reaches("themisto_env.sandbox.compat.in_kernel", FOREIGN) == []  # in both lists: all allowed
    assert source_reaches("themisto_env.sandbox.compat.jupyter", FOREIGN) == [
        "7: inspect_ai._util.error.PrerequisiteError",
        "19: dill._dill._main_module",
    ]
    assert source_reaches("themisto_env.tracing", FOREIGN) == [
        "10: jupyter_core.utils._loop",
        "11: traitlets.config._x",
        "12: ipykernel.kernelapp.IPKernelApp._instance",
        "17: ipykernel.compiler.get_tmp_directory",
        "20: ipykernel.kernelapp.IPKernelApp.kernel_class",
    ]


def test_other_libraries_private_names_live_in_few_modules() -> None:
    """The Jupyter stack's private names and patches in at most 2 modules, other libraries' in at most 5, and
    each module listed still uses them (a listed module that no longer does is taken off the list)."""
    assert len(JUPYTER_COMPAT) <= 2
    assert len(FOREIGN_COMPAT) <= 5
    kinds: dict[str, set[str]] = {}
    for name, path in iter_modules():
        for _, _, kind in classified_reaches(name, path.read_text(encoding="utf-8"), is_package(path)):
            kinds.setdefault(name, set()).add(kind)
    for name in JUPYTER_COMPAT:
        assert kinds.get(name, set()) & {"jupyter", "patch", "object"}, f"{name} uses no Jupyter private name"
    for name in FOREIGN_COMPAT:
        assert kinds.get(name, set()) & {"foreign", "object"}, f"{name} uses no other library's private name"


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
