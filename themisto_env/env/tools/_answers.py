"""The typed answers of the tools whose answer is not a kernel's (`themisto_env.sandbox.kernel.answers`):
get_source (the kernel's or the history's), recent_executions and try_cell."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceAnswer(_Answer):
    """The source of a function or class, from the kernel or, where it has none, from the history.

    Attributes:
        name: The name asked for.
        source: The source (bounded).
        origin: ``kernel``, or ``history`` (the most recent definition executed).
        defines: The ``class``/``function`` and its name the kernel's source defines, when not ``name``.
        instance_of: The class looked up in the history for an instance of a user class.
        kernel_error: Why the kernel could not show it (``history`` only).
        execution: The execution that holds the definition (``history`` only).
    """

    name: str
    source: str
    origin: Literal["kernel", "history"]
    defines: str | None = None
    instance_of: str | None = None
    kernel_error: str | None = None
    execution: int | None = None


class ShownExecution(_Answer):
    """One execution as recent_executions shows it: its source and output, cut to share the room."""

    index: int
    source: str
    output: str


class RecentExecutions(_Answer):
    """The most recent executions, oldest first.

    Attributes:
        total: How many executions ran so far.
        executions: The last ones asked for.
    """

    total: int
    executions: tuple[ShownExecution, ...]


class VariableChange(_Answer):
    """A variable a tried cell created, changed or deleted.

    Attributes:
        name: The variable's name.
        type: Its type (the old one's for a deleted variable).
        shape: Its shape (``(3,)``) or length (``len 3``), or empty.
        change: ``created``, ``changed``, ``changed (was ...)``, ``deleted``, or ``set`` (no state to compare).
    """

    name: str
    type: str
    shape: str
    change: str


class TriedCell(_Answer):
    """What a candidate cell did in a disposable kernel (try_cell).

    Attributes:
        status: ``ok``, or how it raised or failed (``raised ValueError: ...``, ``failed (timeout): ...``).
        outputs: Its outputs as text (bounded; empty when it showed nothing).
        changes: The variables it created, changed or deleted, by name (the first ``max_rows``); None when not
            measured (the run failed).
        changed: How many variables it created, changed or deleted in all.
        options_changed: Whether it changed pandas'/numpy's display options.
    """

    status: str
    outputs: str
    changes: tuple[VariableChange, ...] | None
    changed: int = 0
    options_changed: bool = False
