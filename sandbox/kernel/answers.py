"""What the in-kernel helper answers about the user's state: one model per introspection call.

`ANSWERS` maps each helper call to its model; every kernel's ``introspect.ask(call, **args)`` validates the
helper's answer into it, so callers read fields, never dict keys. Sizes are approximate deep sizes in bytes
(numpy ``nbytes``, pandas deep memory usage, containers recursively).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: The views of a DataFrame or Series that ``kernel.introspect.dataframe`` can show.
FrameViewName = Literal["head", "info", "describe"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VariableRow(_Answer):
    """One user variable in a listing.

    Attributes:
        name: The variable's name.
        type: Its type, qualified by module unless builtin or ``__main__`` (``pandas.DataFrame``, ``int``).
        size_bytes: Approximate deep size (0 where the object's own methods raise).
        shape: The shape of arrays and frames.
        length: ``len()`` of containers (None where it has none or it raises).
    """

    name: str
    type: str
    size_bytes: int
    shape: tuple[int, ...] | None = None
    length: int | None = None


class VariableListing(_Answer):
    """The user's variables (imported modules left out), sorted by name.

    Attributes:
        variables: The first rows by name, at most the ``limit`` asked for.
        total: How many user variables there are in all.
    """

    variables: tuple[VariableRow, ...]
    total: int

    @property
    def shown(self) -> int:
        """How many rows the listing holds (fewer than ``total`` when it was cut)."""
        return len(self.variables)


class VariableDetail(_Answer):
    """One variable in detail.

    Attributes:
        name: The variable's name.
        type: Its type, as in `VariableRow`.
        shape: The shape of arrays and frames.
        length: ``len()`` of containers.
        size_bytes: Approximate deep size.
        dtype: The ``dtype`` of arrays and Series.
        dtypes: Column name -> dtype of a DataFrame (the first 50 columns).
        repr: The value as the notebook shows it, cut to the ``max_chars`` asked for (a marker says how
            much was cut); ``<repr failed: ...>`` when the object's ``__repr__`` raises.
    """

    name: str
    type: str
    shape: tuple[int, ...] | None = None
    length: int | None = None
    size_bytes: int
    dtype: str | None = None
    dtypes: dict[str, str] | None = None
    repr: str

    @property
    def shortened(self) -> bool:
        """Whether the repr of a builtin left items or characters out (it marks its cuts with ``...``)."""
        length, text = self.length, self.repr
        if length is None or self.type not in ("str", "bytes", "list", "tuple", "dict", "set", "frozenset"):
            return False
        return len(text) < length if self.type in ("str", "bytes") else length > 50 and "..." in text


class FrameView(_Answer):
    """A view of a pandas DataFrame or Series as text.

    Attributes:
        name: The variable's name.
        view: ``head`` (the first rows), ``info`` (``df.info()``) or ``describe`` (``df.describe()``).
        text: The view as pandas prints it, cut to the ``max_chars`` asked for.
        n: The rows asked for (``head`` only).
        dtypes: Column name -> dtype (``info`` only, where it lists the columns: at most pandas'
            ``display.max_info_columns``).
    """

    name: str
    view: FrameViewName
    text: str
    n: int | None = None
    dtypes: dict[str, str] | None = None


class MemoryRow(_Answer):
    """One variable in a memory report.

    Attributes:
        name: The variable's name.
        type: Its type, as in `VariableRow`.
        size_bytes: Approximate deep size.
    """

    name: str
    type: str
    size_bytes: int


class MemoryReport(_Answer):
    """The kernel's memory and where it goes.

    Attributes:
        kernel_rss_bytes: Resident memory of the kernel process, as it reads it (None where it cannot).
        variables_total_bytes: The sizes of all user variables added up (modules left out).
        variables: The largest variables, largest first, at most the ``top`` asked for.
    """

    kernel_rss_bytes: int | None
    variables_total_bytes: int
    variables: tuple[MemoryRow, ...]


class SourceText(_Answer):
    """The source of a function or class (for another object, of its class).

    Attributes:
        name: The variable's name.
        source: The source, cut to the ``max_chars`` asked for.
    """

    name: str
    source: str


class NamespaceState(_Answer):
    """What introspection must never change: two equal states mean nothing was touched.

    Object ids make it meaningful only within one kernel process (for a state comparable across
    processes, see ``kernel.introspect.fingerprint``).

    Attributes:
        names: Every user name (modules included) -> ``(id, type)`` of its value.
        underscore: ``id`` of the value of ``_`` (the last result).
        out_keys: The execution counts in ``Out``.
        execution_count: The kernel's execution counter.
        history_length: The length of ``In`` (the input history).
    """

    names: dict[str, tuple[int, str]]
    underscore: int
    out_keys: tuple[int, ...]
    execution_count: int
    history_length: int


#: The helper's calls that answer with a model, by call name: ``introspect.ask(call, **args)`` validates
#: the answer into it. A new question of the kernel is a helper function and a line here.
ANSWERS: dict[str, type[BaseModel]] = {
    "list_variables": VariableListing,
    "inspect_variable": VariableDetail,
    "dataframe": FrameView,
    "memory": MemoryReport,
    "source": SourceText,
    "state_fingerprint": NamespaceState,
}

__all__ = [
    "ANSWERS",
    "FrameView",
    "FrameViewName",
    "MemoryReport",
    "MemoryRow",
    "NamespaceState",
    "SourceText",
    "VariableDetail",
    "VariableListing",
    "VariableRow",
]
