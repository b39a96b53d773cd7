"""Rewrite the Sphinx roles in docstrings and comments into what mkdocstrings reads: links, or code.

mkdocstrings renders Markdown and its own cross-references; a Sphinx role (``:class:`~pkg.mod.Name```) shows
on the site as raw text. This script rewrites each role in the docstrings (every string statement: module,
class, function and attribute docstrings) and the comments of the ``.py`` and ``.pyi`` files it is given:

- to a cross-reference ``[`Name`][themisto_env.pkg.Name]`` when its target is an object the documentation
  site renders (read from the ``objects.inv`` a build of the site writes). The target is resolved as Python
  would: the enclosing classes, the module's namespace (its definitions and imports, through griffe, which
  mkdocstrings reads the source with), the file's imports (also those inside functions), the full path, then
  a path ending in the target that names one object only. The link names the object where the site shows it
  (the package face: ``themisto_env.sandbox.Kernel``, not ``themisto_env.sandbox.kernel.core.Kernel``), so it
  survives a module's move inside its package (a target written before the sandbox's move is read through
  `MOVED`);
- to code, ``` `Name` ```, when the target is not on the site (a private module, an external library), and
  always in comments (a link there is noise).

The title is Sphinx's: an explicit ``Title <target>``, the last part of a ``~target``, else the target as
written. A line the rewrite makes longer than the line length (120) is wrapped at a space outside code and
links. Other strings (messages, test data) are left alone and listed. Running it twice changes nothing.

It exits 1 when a file was left as it was or a line is still too long (both listed). Usage (from the
repository's root, in the docs venv: ``pip install -e '.[docs]'``)::

    python3 scripts/docstring_roles.py            # rewrite the default folders, print a summary
    python3 scripts/docstring_roles.py --check    # change nothing; exit 1 if a role is left (lists them)
    python3 scripts/docstring_roles.py --unresolved  # also list the targets that name no object at all
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import subprocess
import sys
import tempfile
import tokenize
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("themisto_env", "agents", "sandbox", "benchmarks", "scripts", "tests", "examples", "docs/hooks")
"""Where the roles are looked for (relative to the repository), but `SKIPPED` (fixtures; the tests' samples)."""
SKIPPED = ("tests/fixtures", "tests/test_docs_site.py")
MAPPED = {"agents": "themisto_env.agents", "sandbox": "themisto_env.sandbox", "themisto_env": "themisto_env"}
"""Folders installed as packages (``[tool.setuptools] package-dir``): folder -> import name."""
LINE_LENGTH = 120
MOVED = {
    "kernel_environments": "environments",
    "kernel": "kernel.core",
    "kernel_contract": "kernel.contract",
    "kernel_process": "kernel.process",
    "kernel_messaging": "kernel.messaging",
    "kernel_snapshots": "kernel.snapshots",
    "kernel_introspection": "kernel.introspection",
    "introspection": "kernel.answers",
    "launcher": "kernel.launcher",
    "pool": "kernel.pool",
    "conformance": "kernel.conformance",
    "kernel_helper": "kernel.helper",
    "template": "template.core",
    "zygote": "template.zygote",
    "template_launcher": "kernel.forked",
    "copy_identity": "kernel.copy_uid",
    "docker_template": "template.docker",
    "local": "backends.local",
    "docker": "backends.docker",
    "docker_engine": "engine",
    "docker_containers": "backends.containers",
    "image": "image.cli",
    "image_spec": "image.spec",
    "image_build": "image.build",
    "debootstrap": "image.debootstrap",
    "ray_cluster": "ray.cluster",
    "snapshots": "store.snapshot_store",
    "workdir": "store.workdir",
    "lifetime": "lifetime.reaper",
    "owners": "lifetime.owners",
    "leftovers": "lifetime.leftovers",
    "run_root": "lifetime.run_root",
}
"""The sandbox's modules moved into rooms (issue 37): ``themisto_env.sandbox.<old>`` -> ``themisto_env.sandbox.<new>``.

Used only for a target that names nothing where it was written: a role written before the move then links
to (or shows) the object's new home.
"""


def moved(target: str) -> str:
    """The target with an old sandbox module's path replaced by its room's (the target itself if none applies)."""
    prefix = "themisto_env.sandbox."
    if not target.startswith(prefix):
        return target
    module, dot, rest = target[len(prefix) :].partition(".")
    new = MOVED.get(module)
    return f"{prefix}{new}{dot}{rest}" if new else target


ROLE = re.compile(
    r"(?<![\w`]):(?:py:)?(?P<role>class|func|meth|mod|attr|data|exc|obj|const|type):`(?P<body>[^`]+)`(?!`)"
)
"""A Sphinx role of the Python domain, ``:class:`target``` (the body may hold ``~``, ``!``, ``Title <target>``)."""


def roles_in(text: str) -> list[str]:
    """The Sphinx roles in a text, as written."""
    return [match.group(0) for match in ROLE.finditer(text)]


# --- what the site documents -----------------------------------------------------------------------------


def read_inventory(path: Path) -> dict[str, str]:
    """The Python objects a Sphinx inventory (``objects.inv``, which mkdocstrings writes) lists -> their anchors.

    An object is listed under the path the site shows it (its anchor) and under each path it is imported at
    (pointing to that anchor): autorefs resolves them all.
    """
    data = path.read_bytes()
    start = 0
    for _ in range(4):
        start = data.index(b"\n", start) + 1
    names = {}
    for line in zlib.decompress(data[start:]).decode().splitlines():
        name, domain_role, _, uri = line.split(" ", 4)[:4]
        if domain_role.startswith("py:"):
            anchor = uri.partition("#")[2]
            names[name] = name if anchor in ("$", "") else anchor
    return names


def build_inventory() -> dict[str, str]:
    """Build the site into a temporary folder (not strict: the roles may still be there) and read its inventory."""
    with tempfile.TemporaryDirectory(prefix="themisto-roles-") as site:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        command = [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", site]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        inventory = Path(site) / "objects.inv"
        if done.returncode != 0 or not inventory.exists():
            sys.exit(f"the docs site did not build (needs the docs extra): {done.stderr.strip()[-2000:]}")
        return read_inventory(inventory)


def load_collection():  # -> griffe.ModulesCollection (griffe is imported here: the docs extra)
    """The package as mkdocstrings reads it: griffe over the laid-out tree, each face from its ``__init__.pyi``."""
    import griffe

    sys.path.insert(0, str(REPO / "docs" / "hooks"))
    from griffe_faces import PackageFaces
    from package_tree import package_tree

    loader = griffe.GriffeLoader(
        extensions=griffe.load_extensions(PackageFaces()),
        search_paths=[str(package_tree()), *(path for path in sys.path if path)],
        allow_inspection=False,
    )
    loader.load("themisto_env", try_relative_path=False)
    loader.resolve_aliases(implicit=False, external=None)
    return loader.modules_collection


@dataclass
class Site:
    """The objects the site documents and how to find one from a path, a name or a suffix."""

    collection: object
    documented: dict[str, str]
    """Every path autorefs resolves -> the path the site shows its object under (see `read_inventory`)."""
    where: dict[str, str] = field(default_factory=dict)
    """Canonical path (where an object is defined) -> the path the site shows it under, the nearest face."""
    by_suffix: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Last one or two parts of every object's canonical path -> the canonical paths."""

    def __post_init__(self) -> None:
        for name in sorted(set(self.documented.values())):
            canonical = self.canonical(name)
            if canonical is not None:
                best = self.where.get(canonical)
                if best is None or _closeness(name, canonical) > _closeness(best, canonical):
                    self.where[canonical] = name
        for module in list(self.collection.members.values()):  # type: ignore[attr-defined]
            self._index(module, set())

    def _index(self, obj, seen: set[str]) -> None:
        if obj.is_alias or obj.path in seen:
            return
        seen.add(obj.path)
        parts = obj.path.split(".")
        for size in (1, 2, 3):
            if len(parts) > size:
                self.by_suffix[".".join(parts[-size:])].add(obj.path)
        for member in obj.members.values():
            self._index(member, seen)

    def canonical(self, path: str) -> str | None:
        """The canonical path of the object at ``path`` (through aliases), None if there is none."""
        try:
            return self.collection[path].canonical_path  # type: ignore[index]
        except Exception:  # KeyError, griffe's alias and name resolution errors
            return None

    def documented_path(self, canonical: str) -> str | None:
        """The path the site shows the object under, None if the site does not show it."""
        return self.where.get(canonical) or self.documented.get(canonical)


def _closeness(shown: str, canonical: str) -> tuple[int, int]:
    """Prefer the face nearest to where the object is defined (its own package's), then the shorter path."""
    common = 0
    for a, b in zip(shown.split("."), canonical.split("."), strict=False):
        if a != b:
            break
        common += 1
    return common, -len(shown)


# --- a file's scopes and imports ---------------------------------------------------------------------------


def module_name(path: Path) -> str | None:
    """The import name of a file of the package, None for a file outside it (tests, scripts)."""
    relative = path.resolve().relative_to(REPO)
    package = MAPPED.get(relative.parts[0])
    if package is None:
        return None
    parts = [package, *relative.parts[1:-1]]
    if relative.stem != "__init__":
        parts.append(relative.stem)
    return ".".join(parts)


@dataclass
class FileScope:
    """What a name in a file may refer to: its module, its classes by line, its imports."""

    module: str | None
    classes: list[tuple[int, int, str]]
    """(first line, last line, dotted name in the module) of each class."""
    imports: dict[str, str]
    """Name bound by an import anywhere in the file -> the full path it names (module-level ones win)."""

    @classmethod
    def of(cls, tree: ast.Module, module: str | None, is_package: bool) -> FileScope:
        classes: list[tuple[int, int, str]] = []
        imports: dict[str, str] = {}

        def visit(node: ast.AST, prefix: str, depth: int) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    name = f"{prefix}{child.name}"
                    classes.append((child.lineno, child.end_lineno or child.lineno, name))
                    visit(child, f"{name}.", depth + 1)
                    continue
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for alias in child.names:
                        bound, target = _import_binding(child, alias, module, is_package)
                        if target and (depth == 0 or bound not in imports):
                            imports[bound] = target
                visit(child, prefix, depth + 1 if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else depth)

        visit(tree, "", 0)
        return cls(module, classes, imports)

    def enclosing(self, line: int) -> list[str]:
        """The dotted names of the classes around a line, innermost first."""
        around = [(first, name) for first, last, name in self.classes if first <= line <= last]
        return [name for _, name in sorted(around, reverse=True)]


def _import_binding(node: ast.Import | ast.ImportFrom, alias: ast.alias, module: str | None, is_package: bool):
    if isinstance(node, ast.Import):
        if alias.asname:
            return alias.asname, alias.name
        first = alias.name.split(".")[0]
        return first, first
    base = node.module or ""
    if node.level:
        if module is None:
            return alias.asname or alias.name, None
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if is_package else 0)
        base = ".".join([*parts[:keep], *([base] if base else [])])
    return alias.asname or alias.name, f"{base}.{alias.name}" if base else alias.name


# --- one role ------------------------------------------------------------------------------------------------


@dataclass
class Role:
    """A role's parts: what it shows and what it points at."""

    kind: str
    title: str
    target: str
    link: bool

    @classmethod
    def parse(cls, kind: str, body: str) -> Role:
        body = " ".join(body.split())
        explicit = re.fullmatch(r"(?P<title>.*\S)\s*<(?P<target>[^<>]+)>", body)
        if not explicit:
            body = body.replace(" ", "")  # a target cut at a line's end (``a.b.\n    C``)
        link = True
        if explicit:
            title, target = explicit["title"], explicit["target"].strip()
        else:
            target = body
            if target.startswith("!"):
                target, link = target[1:], False
            shortened = target.startswith("~")
            target = target.lstrip("~")
            title = target.lstrip(".").split(".")[-1] if shortened else target.lstrip(".")
        target = target.lstrip("~!").lstrip(".")
        if kind in ("func", "meth") and target.endswith("()"):
            target = target[:-2]
        return cls(kind, title, target, link)


def resolve(role: Role, scope: FileScope, line: int, site: Site) -> str | None:
    """The canonical path of the object a role's target names, None if it names none that griffe knows."""
    target = role.target
    first, _, rest = target.partition(".")
    candidates = []
    if scope.module:
        candidates += [f"{scope.module}.{cls}.{target}" for cls in scope.enclosing(line)]
        candidates.append(f"{scope.module}.{target}")
    if first in scope.imports:
        candidates.append(scope.imports[first] + (f".{rest}" if rest else ""))
    candidates.append(target)
    for candidate in candidates:
        canonical = site.canonical(candidate)
        if canonical is not None:
            return canonical
    # a path ending in the target, if it names one object only (``KernelPool.take`` named in another module)
    suffix = ".".join(target.split(".")[-3:])
    found = {path for path in site.by_suffix.get(suffix, ()) if path.endswith("." + target) or path == target}
    if len(found) == 1:
        return site.canonical(found.pop())
    return None


def rewrite_role(match: re.Match[str], scope: FileScope, line: int, site: Site, in_comment: bool, log: Log) -> str:
    role = Role.parse(match["role"], match["body"])
    canonical = resolve(role, scope, line, site)
    if canonical is None and moved(role.target) != role.target:  # written before the sandbox's move
        new = moved(role.target)
        title = new if role.title == role.target else role.title
        renamed = Role(role.kind, title, new, role.link)
        canonical = resolve(renamed, scope, line, site)
        if canonical is not None:
            role = renamed
    code = f"`{role.title}`"
    if canonical is None:
        log.unresolved[role.target] += 1
    if in_comment or not role.link or canonical is None:
        log.code += 1
        return code
    shown = site.documented_path(canonical)
    if shown is None:
        log.code += 1
        return code
    log.links += 1
    return f"[{code}][{shown}]"


# --- a file ----------------------------------------------------------------------------------------------


@dataclass
class Log:
    """What a run did and found."""

    links: int = 0
    code: int = 0
    files: int = 0
    unresolved: Counter[str] = field(default_factory=Counter)
    left: list[str] = field(default_factory=list)
    """``path:line: role`` of the roles left (in strings that are not docstrings)."""
    long: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    """Files not written: the rewrite would not parse, or changed code (a bug of this script)."""


def docstring_starts(tree: ast.Module) -> set[tuple[int, int]]:
    """(line, column) of each string statement: the docstrings of modules, classes, functions and attributes."""
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            starts.add((node.lineno, node.col_offset))
    return starts


def rewrite_source(source: str, path: Path, site: Site, log: Log) -> str:
    """The source with the roles of its docstrings and comments rewritten."""
    tree = ast.parse(source)
    scope = FileScope.of(tree, module_name(path), path.stem == "__init__")
    docstrings = docstring_starts(tree)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for text in lines:
        offsets.append(offsets[-1] + len(text))
    edits: list[tuple[int, int, str, bool]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.STRING, tokenize.COMMENT) or not ROLE.search(token.string):
            continue
        comment = token.type == tokenize.COMMENT
        if not comment and token.start not in docstrings:
            log.left += [f"{path.relative_to(REPO)}:{token.start[0]}: {role}" for role in roles_in(token.string)]
            continue
        start = offsets[token.start[0] - 1] + token.start[1]
        end = offsets[token.end[0] - 1] + token.end[1]

        def replace(
            match: re.Match[str], first_line: int = token.start[0], text: str = token.string, comment: bool = comment
        ) -> str:
            line = first_line + text.count("\n", 0, match.start())
            return rewrite_role(match, scope, line, site, comment, log)

        edits.append((start, end, ROLE.sub(replace, token.string), comment))
    if not edits:
        return source
    pieces, position, changed = [], 0, set()
    for start, end, text, comment in edits:
        pieces.append(source[position:start])
        if not comment:  # a comment never grows: its roles become their (shorter) titles
            first = sum(piece.count("\n") for piece in pieces)
            changed.update(range(first, first + text.count("\n") + 1))
        pieces.append(text)
        position = end
    pieces.append(source[position:])
    new = wrap_long_lines("".join(pieces), changed, path, log)
    if _code(ast.parse(new)) != _code(tree):
        raise RuntimeError(f"{path}: the rewrite changed more than docstrings (a bug of this script); not written")
    return new


def _code(tree: ast.Module) -> str:
    """The tree without its docstrings' text: what a rewrite must leave as it was."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            node.value.value = ""
    return ast.dump(tree)


SECTION_ITEM = re.compile(r"\s*\*{0,2}\w+(\s*\([^)]*\))?:\s")
"""A Google section's item (``name (type): text``): its continuation is indented one level more."""


def wrap_long_lines(source: str, changed: set[int], path: Path, log: Log) -> str:
    """Wrap the changed lines longer than the limit at a space outside code and links.

    What is cut off a line goes to the start of the next line when that line goes on with the same paragraph
    (same indentation, not a section's item, a list item or the docstring's end), else onto a line of its own.
    """
    lines = source.split("\n")
    inside = set(changed)  # the lines of the rewritten docstrings: a cut-off rest stays inside its docstring
    out: list[str] = []
    carry = ""
    for number, line in enumerate(lines):
        if carry:
            line = line[: len(line) - len(line.lstrip())] + carry + " " + line.lstrip()
            carry = ""
        if number in changed and len(line) > LINE_LENGTH:
            cut = _break_at(line)
            if cut is None:
                log.long.append(f"{path.relative_to(REPO)}:{number + 1}")
            else:
                indent = " " * (len(line) - len(line.lstrip()))
                more = "    " if SECTION_ITEM.match(line) else ""
                rest = line[cut:].strip()
                line = line[:cut].rstrip()
                following = lines[number + 1] if number + 1 < len(lines) else ""
                if not more and number + 1 in inside and _goes_on(following, indent):
                    carry = rest
                    changed.add(number + 1)
                else:
                    out.append(line)
                    line = indent + more + rest
                    while len(line) > LINE_LENGTH and (cut := _break_at(line)) is not None:
                        out.append(line[:cut].rstrip())
                        line = indent + more + line[cut:].strip()
        out.append(line)
    return "\n".join(out)


def _goes_on(line: str, indent: str) -> bool:
    """Whether a docstring line continues the paragraph of a line indented by ``indent``."""
    text = line.strip()
    return (
        bool(text)
        and line[: len(indent)] == indent
        and not line[len(indent)].isspace()
        and not SECTION_ITEM.match(line)
        and not re.match(r"([-*+]|\d+\.|>>>|\"\"\"|\'\'\'|\w+:$)", text)
    )


def _break_at(line: str) -> int | None:
    """The last space within the limit outside code spans and link brackets (past the indentation)."""
    indent = len(line) - len(line.lstrip())
    depth, code, best = 0, False, None
    for index, char in enumerate(line[: LINE_LENGTH + 1]):
        if char == "`":
            code = not code
        elif not code and char == "[":
            depth += 1
        elif not code and char == "]":
            depth = max(0, depth - 1)
        elif char == " " and not code and depth == 0 and index > indent + 8:
            best = index
    return best


def files(folders: Iterable[str]) -> Iterator[Path]:
    """The ``.py`` and ``.pyi`` files under the folders (this script excepted)."""
    for folder in folders:
        root = REPO / folder
        candidates = [root] if root.is_file() else sorted([*root.rglob("*.py"), *root.rglob("*.pyi")])
        for path in candidates:
            relative = path.relative_to(REPO).as_posix()
            if path.resolve() == Path(__file__).resolve() or relative.startswith(SKIPPED) or ".venv" in relative:
                continue
            yield path


def docstring_and_comment_roles(source: str) -> list[tuple[int, str]]:
    """(line, role) of each Sphinx role in the docstrings and comments of a source (what the tests check)."""
    if not ROLE.search(source):
        return []
    docstrings = docstring_starts(ast.parse(source))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.start in docstrings):
            found += [(token.start[0], role) for role in roles_in(token.string)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help=f"files or folders (default: {' '.join(FOLDERS)})")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a docstring holds a role")
    parser.add_argument("--inventory", type=Path, help="an objects.inv of a built site (else the site is built)")
    parser.add_argument("--unresolved", action="store_true", help="list the targets that name no object")
    args = parser.parse_args(argv)
    folders = args.paths or [folder for folder in FOLDERS if (REPO / folder).exists()]
    paths = list(files(folders))
    if args.check:
        left = [
            f"{path.relative_to(REPO)}:{line}: {role}"
            for path in paths
            for line, role in docstring_and_comment_roles(path.read_text())
        ]
        print("\n".join(left) or "no Sphinx roles in docstrings or comments")
        return 1 if left else 0
    paths = [path for path in paths if ROLE.search(path.read_text())]
    if not paths:
        print("no Sphinx roles: nothing to do")
        return 0
    inventory = read_inventory(args.inventory) if args.inventory else build_inventory()
    site = Site(load_collection(), inventory)
    log = Log()
    for path in paths:
        source = path.read_text()
        try:
            new = rewrite_source(source, path, site, log)
        except (RuntimeError, SyntaxError) as exc:
            log.failed.append(f"{path.relative_to(REPO)}: {exc}")
            continue
        if new != source:
            path.write_text(new)
            log.files += 1
    print(f"{log.links} roles became links and {log.code} became code, in {log.files} files")
    if log.left:
        print(f"{len(log.left)} roles left in strings that are not docstrings:", *log.left, sep="\n  ")
    if log.long:
        print(f"{len(log.long)} lines still over {LINE_LENGTH} characters:", *log.long, sep="\n  ")
    if args.unresolved and log.unresolved:
        print(f"{len(log.unresolved)} targets name no object griffe knows (shown as code):")
        for target, count in log.unresolved.most_common():
            print(f"  {count:3}  {target}")
    if log.failed:
        print(f"{len(log.failed)} files left as they were:", *log.failed, sep="\n  ")
    return 1 if log.failed or log.long else 0


if __name__ == "__main__":
    sys.exit(main())
