"""One source from a program's parts: the in-kernel programs (the helper, the template's program) are written
as modules of a package, one part each, and sent to the kernel whole.

A part imports the standard library and, from the parts before it, the names it uses (so linters and readers
follow them). `assemble` joins the parts in their order into one source: their
`from __future__ import annotations` once, at the top, and the imports of the program's own parts left out
(the names they bind are the parts' own, defined earlier in the same source). What remains imports nothing of
`themisto_env`, which a kernel (in a container, in a kernel environment's venv) may not have.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from importlib import resources

from themisto_env.errors import InfrastructureError

__all__ = ["SHARED_PARTS", "assemble"]

#: The parts every in-kernel program starts with (the helper, the template's program): the one module that may
#: use other libraries' private names in a kernel.
SHARED_PARTS = ("themisto_env.sandbox.compat.in_kernel",)

#: The one future import of an assembled program (each part has its own; it must come first in a module).
FUTURE = "from __future__ import annotations"


def assemble(package: str, parts: Sequence[str], *, shared: Sequence[str] = ()) -> str:
    """The one source of the program whose parts are the modules `parts` of `package`, in that order.

    Args:
        package: The package holding the parts (``themisto_env.sandbox.kernel.helper``); its docstring is the
            program's.
        parts: The parts' module names, each after those it imports from.
        shared: Parts of other packages, by their full names, put first (self-contained: they import no
            part); a part imports from them by those names.

    Returns:
        The package's docstring, the one future import, then each part's code without its future import and
        without its imports of the other parts.

    Raises:
        InfrastructureError: A part imports a part after it, or another module of `themisto_env`.
    """
    own = re.compile(rf"^from {re.escape(package)}\.(\w+) import ")
    common = re.compile(rf"^from ({'|'.join(re.escape(name) for name in shared) or '$^'}) import ")
    doc = importlib.import_module(package).__doc__
    chunks = [*([_string(doc)] if doc else []), FUTURE]
    files = [(*name.rsplit(".", 1), name) for name in shared] + [(package, part, part) for part in parts]
    for index, (home, module, part) in enumerate(files):
        chunks += ["", "", f"# -- the part {part} --"]
        skipping = False
        for line in resources.files(home).joinpath(f"{module}.py").read_text().splitlines():
            if skipping:  # inside a parenthesised import of another part
                skipping = not line.startswith(")")
                continue
            if common.match(line) and index >= len(shared):
                skipping = line.rstrip().endswith("(")
                continue
            found = own.match(line)
            if found:
                if index < len(shared) or found.group(1) not in parts[: index - len(shared)]:
                    raise InfrastructureError(f"{home}.{part} imports {found.group(1)}, not a part before it")
                skipping = line.rstrip().endswith("(")
                continue
            if line.startswith(("from themisto_env", "import themisto_env")):
                raise InfrastructureError(f"{home}.{module} imports from themisto_env: the kernel may not have it")
            if line.strip() != FUTURE:
                chunks.append(line)
    return "\n".join(chunks) + "\n"


def _string(text: str) -> str:
    """``text`` as a string literal: in triple quotes where it can be, as it reads in its source."""
    return f'"""{text}"""' if '"""' not in text and "\\" not in text and not text.endswith('"') else repr(text)
