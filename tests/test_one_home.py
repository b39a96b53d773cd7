"""One home per name: a module's ``__all__`` lists only what it defines, and nobody imports a name from a module
that merely imported it.

Read from the sources with ``ast`` (nothing is imported): every module of the package (``agents/`` and
``sandbox/`` as ``themisto_env.agents`` and ``themisto_env.sandbox``, as pyproject's ``package-dir`` maps
them) and every importer of them in the package, ``tests/``, ``scripts/``, ``benchmarks/`` and
``examples/``. A package's face (its ``__init__`` and the ``__init__.pyi`` stub that lists its names) is
the one other address of a public name: ``from themisto_env.data import Trajectory`` is as good as
``from themisto_env.data.trajectory import Trajectory``.
"""

from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where each top-level import name's sources are (pyproject's package-dir).
SOURCES = {
    "themisto_env": ROOT / "themisto_env",
    "themisto_env.agents": ROOT / "agents",
    "themisto_env.sandbox": ROOT / "sandbox",
}
IMPORTERS = (ROOT / "tests", ROOT / "scripts", ROOT / "benchmarks", ROOT / "examples")


@dataclass
class Module:
    """What one module's source defines, imports and exports."""

    name: str
    path: Path
    is_package: bool
    defined: set[str] = field(default_factory=set)
    imported: set[str] = field(default_factory=set)
    exported: list[str] | None = None  # a literal ``__all__`` (the stub's names for a package with one)


def _module_name(path: Path) -> str | None:
    """The import name of a source file of the package, or None for another file."""
    for package, folder in sorted(SOURCES.items(), key=lambda item: -len(str(item[1]))):
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if package == "themisto_env" and parts and parts[0] in ("agents", "sandbox"):
                return None  # not a folder of the package (agents/ and sandbox/ live beside it)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    return None


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's top-level statements, with those inside top-level ``if``/``try`` blocks."""
    statements: list[ast.stmt] = []
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        statements.append(node)
        if isinstance(node, ast.If):
            pending[:0] = [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending[:0] = [*node.body, *[s for h in node.handlers for s in h.body], *node.orelse, *node.finalbody]
    return statements


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _read(module: Module, tree: ast.Module) -> None:
    for node in _top_level(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            module.defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = set().union(*(_targets(t) for t in targets))
            module.defined |= names
            if "__all__" in names and isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                with contextlib.suppress(ValueError):  # computed (a lazy face's): its stub says what it exports
                    module.exported = list(ast.literal_eval(node.value))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            module.imported |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}


@cache
def modules() -> dict[str, Module]:
    """Every module of the package by import name."""
    found: dict[str, Module] = {}
    for folder in SOURCES.values():
        for path in sorted(folder.rglob("*.py")):
            name = _module_name(path)
            if name is None or "image" in path.relative_to(folder).parts:
                continue  # the kernel image's files are copied into containers, not imported
            module = Module(name, path, path.name == "__init__.py")
            _read(module, ast.parse(path.read_text(encoding="utf-8")))
            stub = path.with_suffix(".pyi")
            if stub.exists():
                faced = Module(name, stub, True)
                _read(faced, ast.parse(stub.read_text(encoding="utf-8")))
                module.exported = sorted(faced.imported | faced.defined | set(module.exported or ()))
            module.defined -= {"__getattr__", "__dir__"}
            found[name] = module
    return found


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _importers() -> list[tuple[Path, str, bool, ast.Module]]:
    files = [(m.path, m.name, m.is_package) for m in modules().values()]
    files += [
        (m.path.with_suffix(".pyi"), m.name, True) for m in modules().values() if m.path.with_suffix(".pyi").exists()
    ]
    for folder in IMPORTERS:
        files += [(path, "", False) for path in sorted(folder.rglob("*.py"))]
    return [(path, name, pkg, ast.parse(path.read_text(encoding="utf-8"))) for path, name, pkg in files]


def test_all_lists_only_what_the_module_defines() -> None:
    """A module's ``__all__`` names only what the module itself defines (a package's face re-exports)."""
    wrong = [
        f"{m.path.relative_to(ROOT)}: {name}"
        for m in modules().values()
        if not m.is_package and m.exported
        for name in m.exported
        if name not in m.defined
    ]
    assert not wrong, "__all__ lists a name defined elsewhere (list it in its home):\n" + "\n".join(wrong)


def test_names_are_imported_from_their_home() -> None:
    """``from M import N`` finds N defined in M, or M is a package whose face lists N, or N is M's submodule."""
    known = modules()
    wrong: list[str] = []

    def check(path: Path, line: int, source: Module, name: str) -> None:
        if name == "*" or f"{source.name}.{name}" in known or name in source.defined:
            return
        if source.is_package and name in (source.exported or ()):
            return
        homes = sorted(m.name for m in known.values() if not m.is_package and name in m.defined)
        where = f" (defined in {', '.join(homes)})" if homes else ""
        wrong.append(f"{path.relative_to(ROOT)}:{line}: {name} from {source.name}{where}")

    for path, importer, is_package, tree in _importers():
        aliases: dict[str, Module] = {}  # a module imported whole, by its local name: ``module.NAME`` is checked too
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases |= {a.asname: known[a.name] for a in node.names if a.asname and a.name in known}
            if not isinstance(node, ast.ImportFrom):
                continue
            module = _absolute(importer, is_package, node)
            source = known.get(module)
            if source is None:
                continue
            for alias in node.names:
                check(path, node.lineno, source, alias.name)
                if f"{module}.{alias.name}" in known:
                    aliases[alias.asname or alias.name] = known[f"{module}.{alias.name}"]
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)  # patching the name an importer holds is not reading it there
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                check(path, node.lineno, aliases[node.value.id], node.attr)
    assert not wrong, f"{len(wrong)} names imported from a module that only imported them:\n" + "\n".join(wrong)


def test_the_checker_reads_homes_and_faces() -> None:
    """The checker finds the modules, what they define and the faces' names (a wrong folder would make the
    tests above pass with nothing checked)."""
    known = modules()
    assert {"themisto_env.agents.base", "themisto_env.sandbox.kernel.core", "themisto_env.data.trajectory"} <= set(
        known
    )
    assert "Trajectory" in known["themisto_env.data.trajectory"].defined
    assert "Trajectory" not in known["themisto_env.data"].defined
    assert {"Trajectory", "agreement"} <= set(known["themisto_env.data"].exported or ())
    assert {"score_sample", "SampleScore"} <= set(known["themisto_env.scoring"].exported or ())
    assert len(_importers()) > len(known) + 50  # the package's modules, its faces, and the tests, scripts, ...
