"""The episode's record: which samples are left, the sample and draw being predicted, and for that draw its
tool calls, the tool budget and cost, and the infrastructure faults that touch it.

`SampleRecord` is the one place that writes a sample's tool count, cost and faults (the episode's tool turns,
whichever face steps it); [`EpisodeRecord`][themisto_env.env.EpisodeRecord] holds the queue of an episode's samples
and the current sample's record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from themisto_env.data.samples import Sample
from themisto_env.data.trajectory import Trajectory
from themisto_env.env.config import EnvConfig
from themisto_env.env.outcomes import ToolOutcome, state_mismatch
from themisto_env.env.tools import ToolCall
from themisto_env.scoring.score import SampleScore
from themisto_env.state.check import StateReport

__all__ = ["MAX_TOOL_REFUNDS", "SANDBOX_FAILED", "EpisodeRecord", "SampleRecord", "ToolTurn"]

MAX_TOOL_REFUNDS = 3
"""How many tool calls per sample are given back when the sandbox, not the agent, failed them (a
disposable kernel that could not reach the state, ...): past it they count, so that no agent earns
endless free calls from code that keeps breaking its kernel's start."""

SANDBOX_FAILED = "The tool could not run because the sandbox failed; it was recovered: try again."
"""What a tool call the machinery failed is answered (the call did not run)."""


@dataclass(frozen=True)
class ToolTurn:
    """One tool turn as the record took it (`SampleRecord.tool_turn`).

    Attributes:
        text: What the agent reads: the tool's answer, the refusal past the budget, `SANDBOX_FAILED`, or
            why the action was invalid.
        reward: The turn's reward: `-tool_cost` for a counted turn, 0 for a refused one.
        refused: The budget was spent: nothing ran, nothing was counted or paid.
        outcome: What the call came to; None when it was refused or nothing could run.
    """

    text: str
    reward: float = 0.0
    refused: bool = False
    outcome: ToolOutcome | None = None


class SampleRecord:
    """One prediction's bookkeeping (one draw of one sample): its tool calls against the budget, what they
    cost, and the infrastructure faults that touch the sample.

    Args:
        tool_budget: Tool calls allowed.
        tool_cost: What each call costs.

    Attributes:
        tools_used: The tool calls counted against the budget (a call the sandbox failed is given back, up
            to `MAX_TOOL_REFUNDS` faults per sample).
        tool_cost_paid: What the draw's tool steps paid (each call pays, given back or not).
        tool_calls: The calls that ran: ``{"tool", "args", "ok"}``.
        faults: The infrastructure failures that touch the sample (it is unscored when there is one).
    """

    def __init__(self, tool_budget: int, tool_cost: float) -> None:
        self.tool_budget = tool_budget
        self.tool_cost = tool_cost
        self.tools_used = 0
        self.tool_cost_paid = 0.0
        self.tool_calls: list[dict[str, Any]] = []
        self.faults: list[str] = []

    @property
    def tools_left(self) -> int:
        """Tool calls the draw may still make."""
        return self.tool_budget - self.tools_used

    @property
    def budget_spent(self) -> bool:
        """Whether a further call is refused (nothing runs, it costs nothing)."""
        return self.tools_used >= self.tool_budget

    def refusal(self) -> str:
        """What a call past the budget is answered (the one refusal text of every bridge)."""
        return (
            f"Tool budget spent ({self.tool_budget} calls for this sample): nothing was run. "
            "Submit your prediction now (a Prediction action, or the submit tool where there is one)."
        )

    def tool_turn(self, call: ToolCall, run: Callable[[ToolCall], ToolOutcome]) -> ToolTurn:
        """One tool turn of the episode: refused past the budget (nothing runs, it costs nothing); else counted,
        run, recorded and paid. A call the machinery failed is answered `SANDBOX_FAILED` and given back while
        the sample has at most `MAX_TOOL_REFUNDS` faults; one that ran is listed in `tool_calls`.

        Args:
            call: The tool call.
            run: Runs it on the sample's state (the episode's server, or its group's answer).
        """
        if self.budget_spent:
            return ToolTurn(self.refusal(), refused=True)
        self.tools_used += 1
        outcome = run(call)
        self.faults.extend(outcome.faults)
        if outcome.result is None:
            if len(self.faults) <= MAX_TOOL_REFUNDS:  # not the agent's fault, up to a cap per sample
                self.tools_used -= 1
            return ToolTurn(SANDBOX_FAILED, self._pay(), outcome=outcome)
        self.tool_calls.append({"tool": call.tool, "args": call.args, "ok": outcome.result.ok})
        return ToolTurn(outcome.result.text, self._pay(), outcome=outcome)

    def invalid_turn(self, error: str) -> ToolTurn:
        """A turn whose action cannot run (malformed, or tools off): refused past the budget as any turn,
        else counted and paid, and answered `Invalid action: ...`."""
        if self.budget_spent:
            return ToolTurn(self.refusal(), refused=True)
        self.tools_used += 1
        return ToolTurn(f"Invalid action: {error}", self._pay())

    def _pay(self) -> float:
        """The taken call's cost: recorded, and returned as the step's reward (``-tool_cost``)."""
        self.tool_cost_paid += self.tool_cost
        return -self.tool_cost

    def add_faults(self, faults: Iterable[str]) -> None:
        """Infrastructure failures that touch the sample (serving its state, answering its tools)."""
        self.faults.extend(faults)

    def score_args(self, report: StateReport | None) -> dict[str, Any]:
        """What `score` takes of this record and the sample's served
        state: ``tools_used``, ``faults``, ``state_mismatch``."""
        return {"tools_used": self.tools_used, "faults": self.faults, "state_mismatch": state_mismatch(report)}


class EpisodeRecord:
    """An episode's samples: the queue left, the current sample, its draw (pass@k), and its record.

    Args:
        config: The options (tool budget and cost; ``attempts`` per sample).

    Attributes:
        trajectory: The episode's trajectory (None before [`start`][themisto_env.env.EpisodeRecord.start]).
        queue: The samples not scored yet, the current one first.
        sample: The sample being predicted (None before the first).
        draw: Which of the sample's predictions the episode waits for (from 0).
        current: The current draw's `SampleRecord`.
    """

    def __init__(self, config: EnvConfig) -> None:
        self.config = config
        self.trajectory: Trajectory | None = None
        self.queue: list[Sample] = []
        self.sample: Sample | None = None
        self.draw = 0
        self.current = SampleRecord(config.tool_budget, config.tool_cost)

    @property
    def samples_left(self) -> int:
        """Samples of the episode not scored yet, the current one included."""
        return len(self.queue)

    def start(self, trajectory: Trajectory, samples: Iterable[Sample]) -> None:
        """A new episode over ``samples`` of ``trajectory`` (the first is begun by
        [`begin_sample`][themisto_env.env.EpisodeRecord.begin_sample])."""
        self.trajectory = trajectory
        self.queue = list(samples)
        self.draw = 0

    def begin_sample(self) -> Sample:
        """The queue's first sample becomes the current one, with a new record."""
        self.sample = self.queue[0]
        self.current = SampleRecord(self.config.tool_budget, self.config.tool_cost)
        return self.sample

    def finish_draw(self, scored: SampleScore) -> bool:
        """The current draw was scored. Returns True when the same sample takes another prediction (its
        record starts over: no tool calls yet, nothing paid), False when it leaves the queue (its record
        stays as it was until the next sample begins: the last observation shows its tools left)."""
        current = self.current  # its faults are now the score's (a later draw of the sample starts from them)
        current.faults = [scored.infrastructure_error] if scored.infrastructure_error else []
        if self.draw + 1 < self.config.attempts:  # another prediction for the same sample, same state
            self.draw += 1
            current.tools_used, current.tool_calls, current.tool_cost_paid = 0, [], 0.0
            return True
        self.draw = 0
        self.queue.pop(0)
        return False
