"""What the agent reads: the execution history, the cell about to run, and the runtime dump.

The history shows the most recent executions, oldest first, each as::

    # In [7]:
    <source>
    # Out [7]:
    <rendered output, cut to max_output_chars>

``In``/``Out`` numbers are positions in the trajectory (1-based), not the kernel's counter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from themisto_env.data.trajectory import Step, Trajectory
from themisto_env.env.config import EnvConfig
from themisto_env.env.spaces import fit_text
from themisto_env.env.tools import HistoryItem
from themisto_env.errors import HelperError
from themisto_env.sandbox.kernel.contract import KernelLike
from themisto_env.sandbox.rendering import render_outputs


def history_items(steps: Sequence[Step]) -> list[HistoryItem]:
    """Executed steps as the tools' history items (each step's output rendered once, then cached)."""
    return [_history_item(s) for s in steps]


_RENDERED: dict[int, tuple[Step, HistoryItem]] = {}


def _history_item(step: Step) -> HistoryItem:
    cached = _RENDERED.get(id(step))
    if cached is not None and cached[0] is step:
        return cached[1]
    item = HistoryItem(index=step.index, source=step.source, output=render_outputs(step.outputs))
    if len(_RENDERED) > 100_000:
        _RENDERED.clear()
    _RENDERED[id(step)] = (step, item)
    return item


def sample_observation(
    config: EnvConfig,
    trajectory: Trajectory,
    step: int,
    *,
    tools_left: int,
    runtime: str = "",
    tool_result: str = "",
) -> dict[str, str | int]:
    """The env's observation of the state before ``step`` of ``trajectory``: ``history`` (the last
    ``config.history_length`` executions), ``cell`` (the cell about to run, in the output task), ``runtime``
    (the ``full`` mode's dump), ``tool_result`` (the last tool call's answer) and ``tools_left``; each text
    fitted to ``config.max_text_chars``."""
    limit = config.max_text_chars
    recent = trajectory.steps[:step][-config.history_length :] if config.history_length else []
    history = render_history(
        history_items(recent),
        length=config.history_length,
        max_output_chars=config.max_output_chars,
        max_chars=limit,
    )
    cell = trajectory.steps[step].source if config.task == "output" else ""
    return {
        "history": fit_text(history, limit),
        "cell": fit_text(cell, limit),
        "runtime": fit_text(runtime, limit),
        "tool_result": fit_text(tool_result, limit),
        "tools_left": tools_left,
    }


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters]"


def render_history(items: Sequence[HistoryItem], *, length: int, max_output_chars: int, max_chars: int) -> str:
    """The last ``length`` executions as text, never longer than ``max_chars`` (oldest dropped first)."""
    blocks = []
    for item in list(items)[-length:] if length > 0 else []:
        block = f"# In [{item.index + 1}]:\n{item.source.rstrip()}\n"
        if item.output.strip():
            block += f"# Out [{item.index + 1}]:\n{_cut(item.output.rstrip(), max_output_chars)}\n"
        blocks.append(block)
    text = "\n".join(blocks)
    while len(text) > max_chars and blocks:
        blocks.pop(0)
        text = "\n".join(blocks)
    return text[-max_chars:]


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def render_runtime(
    kernel: KernelLike,
    *,
    max_chars: int,
    per_variable_chars: int = 300,
    recorded_sizes: Mapping[str, int] | None = None,
    recorded_memory: int | None = None,
) -> str:
    """Every user variable with type, size and a short repr, and the kernel's memory (Themisto's
    "with runtime information" setting).

    Deterministic for a state: with ``recorded_sizes``, memory and sizes are the figures recorded at
    build time for this state (live ones only when nothing was recorded), and object addresses in
    reprs are masked, so the same sample gives the same text in any process. Where the helper fails on
    the user's data (a ``__len__`` that raises, ...) the text says so: the kernel is fine.

    Raises:
        InfrastructureError: The kernel could not answer.
    """
    sizes = recorded_sizes if recorded_sizes is not None else {}
    try:
        listing = kernel.introspect.list_variables(limit=500)
        if recorded_sizes is not None:
            rss = recorded_memory
            held = sum(sizes.get(row.name, row.size_bytes) for row in listing.variables)
        else:
            memory = kernel.introspect.memory(top=0)
            rss, held = memory.kernel_rss_bytes or 0, memory.variables_total_bytes
    except HelperError as exc:
        return _cut(f"The kernel's variables could not be listed: {exc.detail}", max_chars)
    memory_text = f"{rss:,} bytes" if rss is not None else "not recorded"
    lines = [f"Kernel memory: {memory_text}; variables: {held:,} bytes"]
    for row in listing.variables:
        try:
            text = kernel.introspect.inspect_variable(row.name, max_chars=per_variable_chars).repr
        except HelperError as exc:
            text = f"<not shown: {exc.detail}>"
        shape = f" shape={row.shape}" if row.shape else ""
        first = _ADDRESS.sub("0x…", text.replace("\n", " "))[:per_variable_chars]
        size = sizes.get(row.name, row.size_bytes)
        lines.append(f"{row.name}: {row.type}{shape} ({size:,} bytes) = {first}")
    return _cut("\n".join(lines), max_chars)
