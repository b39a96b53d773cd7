"""griffe extension: a package's face is the names its ``__init__.pyi`` stub imports.

Each package's ``__init__.py`` gets its names from ``lazy_loader.attach_stub``, which reads the ``__init__.pyi``
beside it (``from .core import ThemistoEnv as ThemistoEnv``, a line per name) and returns ``__all__``.
griffe reads the source without running it, so it cannot see that ``__all__``: this extension sets each such
package's exports to the names its stub imports, and the API reference shows each package's face.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import griffe


def stub_names(stub: Path) -> list[str]:
    """The names a package stub makes public: its ``__all__`` if it writes one, else every name it imports."""
    tree = ast.parse(stub.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(element) for element in node.value.elts]  # type: ignore[attr-defined]
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names += [alias.asname or alias.name for alias in node.names]
    return [name for name in names if not name.startswith("_")]


class PackageFaces(griffe.Extension):
    """Sets ``exports`` of every package whose ``__init__.py`` has an ``__init__.pyi`` beside it."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._walk(pkg)

    def _walk(self, module: griffe.Module) -> None:
        paths = module.filepath if isinstance(module.filepath, list) else [module.filepath]
        for path in paths:
            stub = Path(path).with_suffix(".pyi") if path and Path(path).name == "__init__.py" else None
            if stub is not None and stub.exists():
                module.exports = stub_names(stub)
        for member in module.modules.values():
            if not member.is_alias:
                self._walk(member)
