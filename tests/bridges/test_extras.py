"""Each extra brings what its bridge imports: ``pip install 'themisto-env[verifiers]'`` alone is enough for
``vf-eval themisto-env``, and so for every extra and its bridge.

The static check reads the extras from pyproject.toml and the bridge's modules (and the bridge modules they
import) with ``ast``: every third-party module they import, at the top or inside a function, or load by name
(``import_extra("datasets", ...)``, ``importlib.import_module``, ``find_spec``), must belong to a distribution that the
extra's requirements, the base dependencies or what those require (installed metadata) bring. One extra,
verifiers, is also installed alone into a fresh venv with the lock and its bridge imported (slow; pip's
cache makes it about a minute: doing that for every extra would take several).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as metadata
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
#: Each extra's bridge: the modules its users import (the bridge modules they import are followed).
EXTRA_BRIDGES = {
    "rl": ["themisto_env.bridges.rl"],
    "verifiers": ["themisto_env.bridges.vf_env", "themisto_env.bridges.vf_taskset"],
    "inspect": ["themisto_env.bridges.inspect_sandbox", "themisto_env.bridges.inspect_task"],
    "serve": ["themisto_env.bridges.openenv"],
    "ray": [
        "themisto_env.sandbox.ray.cluster",
        "themisto_env.run.executors.ray_actors",
        "themisto_env.build.ray_workers",
    ],
}
#: Calls that load a module by name (their first argument, a string).
LOADERS = {"import_extra", "import_module", "find_spec"}


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def module_files(name: str) -> list[tuple[str, Path]]:
    """The source files of a module or package of this repository, each with the package its relative imports
    start from (``themisto_env.sandbox`` is ``sandbox/``, ``themisto_env.agents`` is ``agents/``)."""
    parts = name.split(".")
    base = {"sandbox": REPO / "sandbox", "agents": REPO / "agents"}.get(parts[1]) if len(parts) > 1 else None
    path = base / Path(*parts[2:]) if base is not None else REPO / Path(*parts)
    if path.is_dir():
        found = []
        for file in sorted(path.rglob("*.py")):
            inner = file.relative_to(path).with_suffix("").parts
            found.append((".".join([name, *inner[:-1]]), file))
        return found
    file = path.with_suffix(".py")
    return [(name.rsplit(".", 1)[0], file)] if file.exists() else []


def _imports(tree: ast.AST, package: str) -> Iterator[str]:
    """The absolute module names a module imports or loads by name, outside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (name for child in node.orelse for name in _imports(child, package))
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside this package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield f"{base}.{node.module}" if node.module else base
            else:
                yield node.module or ""
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0] if node.args else None
            if called in LOADERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value
        yield from _imports(node, package)


def bridge_imports(modules: Iterable[str]) -> set[str]:
    """The top-level third-party names the modules import, following the bridge modules they import."""
    todo, seen, found = list(modules), set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for package, path in module_files(name):
            for imported in _imports(ast.parse(path.read_text(encoding="utf-8")), package):
                top = imported.split(".")[0]
                if top == "themisto_env":
                    if imported.startswith("themisto_env.bridges.") and imported not in seen:
                        todo.append(imported)
                elif top and top not in sys.stdlib_module_names:
                    found.add(top)
    return found


def closure(requirements: Iterable[str]) -> set[str]:
    """The distributions the requirements bring, with what those require (installed metadata)."""
    todo = [Requirement(r) for r in requirements]
    brought: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = name + "".join(f"[{e}]" for e in sorted(requirement.extras))
        if key in brought:
            continue
        brought.add(key)
        brought.add(name)
        try:
            required = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in required:
            needed = Requirement(line)
            extras = requirement.extras or {""}
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                todo.append(needed)
    return brought


@functools.cache
def installed() -> dict[str, list[str]]:
    """Top-level module name -> the installed distributions that provide it."""
    return dict(metadata.packages_distributions())


def distributions_of(top: str) -> set[str]:
    return {canonicalize_name(d) for d in installed().get(top, [])}


@pytest.mark.parametrize("extra", sorted(EXTRA_BRIDGES))
def test_an_extra_brings_every_module_its_bridge_imports(extra: str) -> None:
    project = pyproject()["project"]
    assert extra in project["optional-dependencies"], f"no extra {extra!r} in pyproject.toml"
    brought = closure([*project["dependencies"], *project["optional-dependencies"][extra]])
    imported = bridge_imports(EXTRA_BRIDGES[extra])
    assert imported, f"the {extra} bridge imports nothing: the scan found no module"
    missing = {}
    for top in sorted(imported):
        distributions = distributions_of(top)
        assert distributions, f"{top} (imported by the {extra} bridge) is not installed here: cannot tell its package"
        if not distributions & brought:
            missing[top] = sorted(distributions)
    assert not missing, f"the {extra} extra does not bring what its bridge imports: {missing}"


def test_the_scan_sees_a_module_loaded_by_name() -> None:
    """``import_extra("datasets", ...)`` inside a function counts (the verifiers bridge reaches it through tool_env)."""
    assert "datasets" in bridge_imports(["themisto_env.bridges.vf_taskset"])
    assert "trl" not in bridge_imports(["themisto_env.bridges.inspect_task"])


@pytest.mark.slow  # a fresh venv and an install from PyPI's cache (about a minute)
def test_the_verifiers_extra_alone_in_a_fresh_venv_imports_its_bridge(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    lock = REPO / "requirements" / "lock.txt"
    done = subprocess.run(
        [*install, "-c", str(lock), f"{REPO}[verifiers]"], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    check = (
        "import themisto_env.bridges.vf_taskset\n"
        "from themisto_env.errors import import_extra\n"
        "import_extra('datasets', 'verifiers')\n"  # what vf-eval stopped at
        "print('ok')\n"
    )
    ran = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr[-3000:]
