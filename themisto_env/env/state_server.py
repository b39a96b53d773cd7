"""The tools' view of a served state: `StateServer` is a
[`StateProvider`][themisto_env.state.StateProvider] set up from an env config, plus the observation tools
run on its served state (with recovery after a fault) and the ``full`` mode's dump of it.

How the state is served (pools, templates) is the provider's; budgets, rewards and episodes are the
[`Episode`][themisto_env.env.Episode]'s. Model-written code never runs here (see
`Scorer`).
"""

from __future__ import annotations

from collections.abc import Callable

from themisto_env import tracing
from themisto_env.env.config import EnvConfig
from themisto_env.env.kernel_spec import env_kernel_spec
from themisto_env.env.observation import history_items, render_runtime
from themisto_env.env.outcomes import ToolOutcome
from themisto_env.env.tools import TOOLS, ToolCall, ToolContext, run_tool
from themisto_env.errors import BackendUnavailableError, InfrastructureError
from themisto_env.replay.dataset import Dataset
from themisto_env.sandbox.kernel.spec import KernelSpec
from themisto_env.state.check import expected_fingerprint, fault_text, fresh_before
from themisto_env.state.copies import CodeRun
from themisto_env.state.provider import StateProvider

__all__ = ["StateServer"]


class StateServer(StateProvider):
    """The live state of one selected sample, served on demand and checked, and the tools run on it.

    Args:
        config: The options (the task's, and the kernel's: backend, limits, warm kernels, forking, ...).
        dataset: The dataset whose trajectories are served.
        spec: The kind of kernel the env built once for its parts; by default the config's and dataset's
            (`themisto_env.env.kernel_spec.env_kernel_spec`).
    """

    def __init__(self, config: EnvConfig, dataset: Dataset, *, spec: KernelSpec | None = None) -> None:
        self.config = config
        served = config.observation != "static" or not config.lazy_state
        spec = spec or env_kernel_spec(config, dataset)
        super().__init__(dataset, spec, warm_kernels=config.kernel.warm_kernels, serves=served)

    def recorded_figures(self) -> tuple[dict[str, int], int | None]:
        """Per-variable sizes and kernel memory recorded at build time for the selected state (what tools
        and the ``full`` mode show, so that answers do not depend on how the state was reached)."""
        trajectory, step = self.selected()
        if fresh_before(trajectory, step):
            return {}, None  # a fresh namespace: nothing recorded applies
        before = trajectory.steps[step - 1]
        return before.variables, before.memory_bytes

    def tool_context(
        self, try_code: Callable[[str], CodeRun] | None = None, *, keep_answers: bool = False
    ) -> ToolContext:
        """The tools' view of the selected state (its kernel started, served or not); ``try_code`` runs the
        ``try_cell`` tool's candidates (`try_code`), None where cells
        may not be tried.

        With ``keep_answers`` (this server's own tool calls) the context shares the kernel's answers given
        in this state so far (``ToolContext.answers``); otherwise it has none, and the answers kept are
        forgotten (whoever holds the context may run code in the kernel). Answers are kept only while the
        kernel lives: a kernel that died is found by the tool's own call, and recovered from."""
        trajectory, step = self.selected()
        sizes, memory = self.recorded_figures()
        if not keep_answers or (self.answers and not self.kernel_owner.kernel.is_alive()):
            self.answers = {}
        return ToolContext(
            kernel=self.kernel_owner.kernel,
            history=history_items(trajectory.steps[:step]),
            recorded_sizes=sizes,
            recorded_memory=memory,
            try_code=try_code,
            recorded_fingerprint=expected_fingerprint(trajectory, step),
            answers=self.answers if keep_answers else None,
        )

    def call_tool(self, call: ToolCall, try_code: Callable[[str], CodeRun] | None = None) -> ToolOutcome:
        """Serve the selected state if needed and run one observation tool on it. A failure of the
        machinery is recovered from (the kernel restarted, the state served again) and reported in the
        outcome's faults; a failure of ``try_code``'s disposable kernel is reported, not recovered.

        Raises:
            BackendUnavailableError: The backend is gone.
        """
        faults: list[str] = []
        with tracing.span("themisto.tool_call", {"themisto.tool.name": call.tool}, timed="tools") as span:
            try:
                faults += self.served_faults()  # a lost backend is tried once more by the recovery below
                result = run_tool(call, self.tool_context(try_code, keep_answers=True))
            except InfrastructureError as exc:
                tracing.fail(span, exc)
                tool = TOOLS.get(call.tool)
                if tool is not None and not tool.read_only and not isinstance(exc, BackendUnavailableError):
                    faults.append(fault_text(exc))  # a tool that runs code runs it in a disposable kernel: not ours
                else:
                    faults += self.recover(exc)
                return ToolOutcome(None, tuple(faults))
            tracing.record(span, {"themisto.tool.ok": result.ok, "themisto.tool.faults": len(faults)})
            if faults:
                tracing.fail(span, "; ".join(faults))
            return ToolOutcome(result, tuple(faults))

    def runtime_text(self, max_chars: int) -> str:
        """The ``full`` observation's dump of the selected state's live namespace (with the recorded sizes
        and memory).

        Raises:
            InfrastructureError: The kernel failed (see `recover`).
        """
        sizes, memory = self.recorded_figures()
        return render_runtime(
            self.kernel_owner.kernel, max_chars=max_chars, recorded_sizes=sizes, recorded_memory=memory
        )
