"""A tiny language for writing a notebook development session as a list of steps.

Each session of the bundled dataset is a module in this folder defining ``SESSION`` (a
`SessionScript`). A step is what a person does in the notebook: run a cell (new, edited or
unchanged), write a markdown cell, delete a cell, restart the kernel, save, rename the notebook, or
step away for a while. Cells are named by short labels; their 32-hex ids are derived from the session
and the label, so the generated log is the same on every run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

_NAMESPACE = uuid.UUID("5b0f3c1e-8f0e-4d55-9a38-6f1f1b7e2a11")


@dataclass(frozen=True)
class Run:
    """Run a code cell.

    Attributes:
        cell: The cell's label. A new label creates the cell.
        source: The cell's new source; None re-runs the cell as it is.
        after: For a new cell, the label of the cell it is inserted below (default: at the end).
        think: Seconds spent before running it, overriding the clock's guess.
    """

    cell: str
    source: str | None = None
    after: str | None = None
    think: float | None = None


@dataclass(frozen=True)
class Markdown:
    """Write (or rewrite) a markdown cell and render it."""

    cell: str
    text: str
    after: str | None = None


@dataclass(frozen=True)
class Delete:
    """Delete a cell."""

    cell: str


@dataclass(frozen=True)
class Restart:
    """Restart the kernel: the namespace and the execution counter are gone."""


@dataclass(frozen=True)
class Save:
    """Save the notebook (a ``save_notebook`` event holding the cells as JSON)."""


@dataclass(frozen=True)
class Rename:
    """Rename the notebook."""

    name: str


@dataclass(frozen=True)
class Pause:
    """Step away (lunch, a meeting): the clock jumps."""

    seconds: float


Step = Run | Markdown | Delete | Restart | Save | Rename | Pause


@dataclass
class SessionScript:
    """One kernel's session in a notebook.

    Attributes:
        slug: Short unique name; seeds the clock and the ids.
        notebook_name: The notebook's name at the start.
        user_id: Who works in it.
        expert: JuNE's expert flag.
        start: Wall-clock start, ``YYYY-MM-DD HH:MM:SS``.
        task: The analysis task, for the summary.
        continues: Slug of an earlier session in the same notebook: this one opens the notebook as that
            one left it (same cells, a new kernel).
        steps: What the person does, in order.
    """

    slug: str
    notebook_name: str
    user_id: str
    expert: bool
    start: str
    task: str
    continues: str | None = None
    steps: list[Step] = field(default_factory=list)

    def cell_id(self, label: str) -> str:
        """The 32-hex id of a cell label in this session's notebook (stable across runs)."""
        return uuid.uuid5(_NAMESPACE, f"{self.notebook_name}/{self.slug}/{label}").hex

    def kernel_id(self) -> str:
        """The kernel's id (a uuid, as Jupyter writes it)."""
        return str(uuid.uuid5(_NAMESPACE, f"kernel/{self.slug}"))

    def session_id(self) -> str:
        """The frontend session's id."""
        return str(uuid.uuid5(_NAMESPACE, f"session/{self.slug}"))


def run(cell: str, source: str | None = None, *, after: str | None = None, think: float | None = None) -> Run:
    """Run cell ``cell`` (creating it, or changing its source to ``source`` when given)."""
    return Run(cell, _dedent(source) if source is not None else None, after, think)


def md(cell: str, text: str, *, after: str | None = None) -> Markdown:
    """Write a markdown cell."""
    return Markdown(cell, _dedent(text), after)


def delete(cell: str) -> Delete:
    """Delete a cell."""
    return Delete(cell)


def restart() -> Restart:
    """Restart the kernel."""
    return Restart()


def save() -> Save:
    """Save the notebook."""
    return Save()


def rename(name: str) -> Rename:
    """Rename the notebook."""
    return Rename(name)


def pause(minutes: float) -> Pause:
    """Step away for some minutes."""
    return Pause(minutes * 60.0)


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip("\n")
