"""The data of the observation tools: a call, its result, the context it runs in, and a tool itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field

from themisto_env.errors import ActionError

if TYPE_CHECKING:
    from themisto_env.sandbox.kernel.contract import KernelLike
    from themisto_env.state.copies import CodeRun

#: Runs a candidate cell in a disposable kernel brought to the current state (never the env's own kernel)
#: and reports what it did; raises `InfrastructureError` when that kernel
#: could not be brought to the state.
TryCode = Callable[[str], "CodeRun"]

#: Bounds of `ToolContext.max_chars`.
MIN_RESULT_CHARS = 200
MAX_RESULT_CHARS = 100_000


class ToolCall(BaseModel):
    """An agent's request to run one observation tool (an env action, or a model's tool call).

    Attributes:
        tool: The tool's name, one of `TOOL_NAMES`.
        args: The tool's arguments by name; validated against the tool's args model when run.
    """

    model_config = ConfigDict(extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    """What one tool call produced.

    Attributes:
        tool: The tool's name as called (possibly unknown).
        ok: Whether the tool ran and answered; False for an unknown tool, bad arguments or a name that is
            not defined in the kernel.
        text: What the agent reads: the answer rendered from ``data``, or the error with a hint. Never
            longer than the context's ``max_chars``.
        error: The error message when ``ok`` is False, else None.
        data: The typed answer (the tool's `ObservationTool.answer` model) when ``ok``, else None.
    """

    tool: str
    ok: bool
    text: str
    error: str | None = None
    data: BaseModel | None = None

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-able data (``info["tool_result"]``): ``data`` as its model's dump."""
        data = self.data.model_dump(mode="json") if self.data is not None else None
        return {"tool": self.tool, "ok": self.ok, "text": self.text, "error": self.error, "data": data}


@dataclass(frozen=True)
class HistoryItem:
    """One execution of the trajectory so far, as the env shows it.

    Attributes:
        index: The execution's position in the trajectory (as the env numbers it).
        source: The cell's source code.
        output: The rendered text of the cell's outputs (streams, results, errors).
    """

    index: int
    source: str
    output: str = ""


@dataclass
class ToolContext:
    """The state the tools observe: the live kernel, the executions so far, and the size bounds.

    The tools only read ``kernel``; ``try_cell`` never touches it and runs its candidate through
    ``try_code`` instead.

    Attributes:
        kernel: The started kernel holding the state after the last execution.
        history: The executions so far, oldest first.
        max_chars: Upper bound on the length of every result's text (a marker says when it was cut).
        max_rows: Upper bound on the rows of a listing (variables, memory).
        recorded_sizes: Per-variable sizes recorded at build time for this state, shown instead of live
            ones: a live deep size depends on how an object was built (a dict's spare capacity differs
            after a restore), the recorded one only on the state, so answers are the same however the
            state was reached.
        recorded_memory: The kernel's resident memory recorded at build time for this state, shown
            instead of the live figure (which varies from process to process).
        try_code: Runs a candidate cell in a disposable kernel in this state (the ``try_cell`` tool); None
            where trying cells is not allowed (the output task: running the cell would reveal its output).
        recorded_fingerprint: The namespace fingerprint recorded at build time for this state (name ->
            ``type|shape-or-len|hash``), with which ``try_cell`` tells created variables from changed
            ones; None when not recorded.
        answers: The kernel's answers already given in this served state, kept by whoever serves it (a
            state server) and emptied when the state changes: the tools are read-only, so an answer holds
            until then, and a tool that can be answered from an earlier one asks the kernel nothing. None:
            nothing is kept.
    """

    kernel: KernelLike
    history: Sequence[HistoryItem] = ()
    max_chars: int = 3000
    max_rows: int = 50
    recorded_sizes: Mapping[str, int] | None = None
    recorded_memory: int | None = None
    try_code: TryCode | None = field(default=None, repr=False)
    recorded_fingerprint: Mapping[str, str] | None = field(default=None, repr=False)
    answers: dict[str, Any] | None = field(default=None, repr=False)

    def size_of(self, name: str, live: int) -> int:
        """A variable's size as the tools show it: the recorded one where there is one."""
        return self.recorded_sizes.get(name, live) if self.recorded_sizes is not None else live

    def __post_init__(self) -> None:
        if not MIN_RESULT_CHARS <= self.max_chars <= MAX_RESULT_CHARS:
            raise ValueError(f"max_chars must be in [{MIN_RESULT_CHARS}, {MAX_RESULT_CHARS}], got {self.max_chars}")
        if self.max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {self.max_rows}")


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a model reads it, whoever answers it: its name, what it does, and its arguments.

    The one definition every bridge derives its tools from (the gym env's actions, langchain, inspect,
    TRL, verifiers, OpenEnv): see `themisto_env.env.tools.TOOLS` and `SUBMIT`.

    Attributes:
        name: The tool's name (an env action's `tool`, a framework's tool name).
        description: What the tool answers, written for a model.
        args_model: The pydantic model of the arguments; its fields (types, defaults, bounds, descriptions)
            are the schema a model sees. `extra="forbid"`.
        read_only: The tool only reads the env's kernel and history. False for a tool that runs code (in a
            disposable kernel, never the env's): offered in the next-cell task only, where running code
            reveals nothing the agent is asked to predict, and its answers are never shared between calls.
        returns: What the answer is, for frameworks that read a function's `Returns:` section.
        reads_history: The tool answers from the env's recorded history, not only from the kernel (a kernel
            attached without an episode has none).
    """

    name: str
    description: str
    args_model: type[BaseModel]
    read_only: bool = field(default=True, kw_only=True)
    returns: str = field(default="The answer as text; an error says what went wrong.", kw_only=True)
    reads_history: bool = field(default=False, kw_only=True)


@dataclass(frozen=True)
class ObservationTool(ToolSpec):
    """One observation tool: a `ToolSpec` and what it does.

    Attributes:
        function: `(context, validated_args) -> answer`, a pydantic model whose text `render` makes (its
            return annotation is the tool's `answer`); raises `ToolError` for answers the agent should read
            as an error.
    """

    function: Callable[[ToolContext, Any], BaseModel] = field(repr=False)

    @property
    def answer(self) -> type[BaseModel]:
        """The model of the tool's typed answer (``ToolResult.data``), from its function's return annotation."""
        answer: type[BaseModel] = get_type_hints(self.function)["return"]
        return answer


class ToolError(ActionError):
    """A tool's answer is an error the agent should read (unknown name, wrong kind of variable, ...).

    Raised inside tool functions and turned by `run_tool` into an ``ok=False``
    result; it never leaves ``run_tool``.
    """
