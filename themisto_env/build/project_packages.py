"""The packages a notebook's project asks for: its requirement file, or the distributions its imports name.

For a notebook under a folder (`project_packages`), the first of these found in the notebook's
folder or a folder above it (up to the folder the build was given) decides:

* ``requirements.txt``: its requirement lines (pip options such as ``-r`` are refused, as
  ``themisto kernel-env create`` refuses them: the environment must follow from its lines alone);
* ``environment.yml`` (conda): its dependencies, ``name=1.2`` read as ``name==1.2.*``, the ``pip:`` list
  as is; ``python`` and ``pip`` themselves left out;
* ``pyproject.toml``: ``[project] dependencies``, or Poetry's ``[tool.poetry.dependencies]`` (names only:
  Poetry's ``^1.2`` has no pip spelling);

and when none is there, the notebook's imports: every top-level module its code cells import that is not
in the standard library, not a module of the notebook's own folder, and not the kernel's own (IPython,
ipykernel), mapped to the distribution that provides it (`IMPORT_DISTRIBUTIONS`, e.g. ``sklearn`` ->
``scikit-learn``; an unmapped name is taken as its own distribution's name).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

from themisto_env.errors import ConfigError
from themisto_env.sandbox.environments.environment_spec import normalise_requirements
from themisto_env.syntax import parse as parse_python

__all__ = ["IMPORT_DISTRIBUTIONS", "PROJECT_FILES", "ProjectPackages", "notebook_imports", "project_packages"]

PROJECT_FILES = ("requirements.txt", "environment.yml", "environment.yaml", "pyproject.toml")
"""The files that name a project's packages, in the order they are looked for within one folder."""

IMPORT_DISTRIBUTIONS: dict[str, str] = {
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "cv2": "opencv-python",
    "PIL": "pillow",
    "yaml": "pyyaml",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "jwt": "pyjwt",
    "serial": "pyserial",
    "Crypto": "pycryptodome",
    "Bio": "biopython",
    "attr": "attrs",
    "umap": "umap-learn",
    "fitz": "pymupdf",
    "magic": "python-magic",
    "Levenshtein": "python-levenshtein",
    "mpl_toolkits": "matplotlib",
    "pkg_resources": "setuptools",
    "google.protobuf": "protobuf",
    "tensorflow_datasets": "tensorflow-datasets",
    "sentence_transformers": "sentence-transformers",
    "lightgbm": "lightgbm",
}
"""Import names whose distribution is named otherwise (a small map: the common cases in data science)."""

#: Modules the kernel itself brings (the environment always has them).
KERNEL_MODULES = frozenset({"IPython", "ipykernel", "ipywidgets_kernel", "matplotlib_inline", "dill", "jupyter_client"})


@dataclass(frozen=True)
class ProjectPackages:
    """What a notebook's project asks for.

    Attributes:
        notebook: The notebook.
        requirements: Normalised requirement lines (sorted; the environment's identity).
        origin: Where they come from: the project file's path, or ``imports``.
        detail: For imports: ``sklearn -> scikit-learn, numpy``; for a file: its name.
        error: Why no package set could be made (an unreadable file, a pip option); None when fine.
    """

    notebook: Path
    requirements: tuple[str, ...]
    origin: str
    detail: str = ""
    error: str | None = None


def project_packages(notebook: str | Path, root: str | Path | None = None) -> ProjectPackages:
    """The packages ``notebook``'s project asks for (see the module docstring); never raises: a problem is
    the result's ``error``."""
    notebook = Path(notebook)
    top = Path(root).resolve() if root is not None else notebook.resolve().parent
    folder = notebook.resolve().parent
    while True:
        for name in PROJECT_FILES:
            path = folder / name
            if path.is_file():
                try:
                    lines = _read_project_file(path)
                except ConfigError as exc:
                    return ProjectPackages(notebook, (), str(path), name, error=str(exc))
                return ProjectPackages(notebook, tuple(lines), str(path), name)
        if folder == top or folder.parent == folder or top not in folder.parents:
            break
        folder = folder.parent
    try:
        names = notebook_imports(notebook)
    except (OSError, ValueError) as exc:
        return ProjectPackages(notebook, (), "imports", error=f"cannot read the notebook: {exc}")
    mapped = {name: IMPORT_DISTRIBUTIONS.get(name, name) for name in names}
    detail = ", ".join(f"{name} -> {dist}" if dist != name else name for name, dist in sorted(mapped.items()))
    try:
        lines = normalise_requirements("\n".join(sorted(set(mapped.values()))), source=f"imports of {notebook}")
    except ConfigError as exc:
        return ProjectPackages(notebook, (), "imports", detail, error=str(exc))
    return ProjectPackages(notebook, tuple(lines), "imports", detail or "none beyond the standard library")


def notebook_imports(notebook: str | Path) -> list[str]:
    """The top-level modules a notebook's code cells import that a package must provide: not the
    standard library's, not the kernel's, not a module beside the notebook. Cells that do not parse
    (shell lines, magics other than whole-line ones) are skipped.

    Raises:
        OSError, ValueError: The notebook cannot be read.
    """
    notebook = Path(notebook)
    nb = nbformat.read(notebook, as_version=4)
    local = {p.stem for p in notebook.parent.glob("*.py")} | {
        p.parent.name for p in notebook.parent.glob("*/__init__.py")
    }
    found: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!", "?")))
        try:
            tree = parse_python(code)
        except SyntaxError:
            continue
        found.update(_imported(ast.walk(tree)))
    return sorted(
        name
        for name in found
        if name not in sys.stdlib_module_names and name not in KERNEL_MODULES and name not in local
    )


def _imported(nodes: Iterable[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(_top(node.module))
    return names


def _top(module: str) -> str:
    if module.startswith("google.protobuf"):
        return "google.protobuf"
    return module.split(".")[0]


def _read_project_file(path: Path) -> list[str]:
    """The normalised requirement lines of a project file.

    Raises:
        ConfigError: The file cannot be read or holds something that is not a requirement.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if path.name == "requirements.txt":
        return normalise_requirements(text, source=str(path))
    if path.name.startswith("environment."):
        return normalise_requirements("\n".join(_conda_lines(path, text)), source=str(path))
    return normalise_requirements("\n".join(_pyproject_lines(path, text)), source=str(path))


def _conda_lines(path: Path, text: str) -> list[str]:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    lines: list[str] = []
    for dep in data.get("dependencies") or [] if isinstance(data, dict) else []:
        if isinstance(dep, dict):
            lines.extend(str(d) for d in dep.get("pip") or [])
            continue
        spec = str(dep).split("::")[-1].strip()  # conda-forge::numpy=1.26
        name = spec.split("=")[0].split("<")[0].split(">")[0].split("!")[0].strip()
        if name in ("python", "pip", ""):
            continue
        if "=" in spec and not any(op in spec for op in ("==", ">=", "<=", "!=")):
            version = spec.split("=")[1]  # conda's name=1.2(=build): 1.2.*
            lines.append(f"{name}=={version}.*" if version.count(".") < 2 else f"{name}=={version}")
        else:
            lines.append(spec)
    return lines


def _pyproject_lines(path: Path, text: str) -> list[str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML ({exc})") from None
    project = data.get("project") or {}
    if project.get("dependencies"):
        return [str(d) for d in project["dependencies"]]
    poetry = ((data.get("tool") or {}).get("poetry") or {}).get("dependencies") or {}
    return [name for name in poetry if name.lower() != "python"]
