"""The ``try_cell`` refund is capped: a disposable kernel that never starts is the sandbox's fault and the
call is refunded, at most ``MAX_TOOL_REFUNDS`` times in an episode, then the budget counts again (issue 21)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from themisto_env.env.record import MAX_TOOL_REFUNDS
from themisto_env.env.tools import ToolCall
from themisto_env.errors import KernelStartError


class BrokenKernels:
    """Disposable kernels that never reach the state (a fault injected: the sandbox's, not the agent's)."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise KernelStartError("the disposable kernel did not start")

    def close(self) -> None:
        pass


def test_the_try_cell_refund_is_capped(env_dataset: dict[str, str]) -> None:
    budget = 2
    env = gym.make("themisto/NextCell-v0", **env_dataset, observation="tools", tool_budget=budget).unwrapped
    try:
        env.reset(seed=0)
        env.episode.scorer.disposable_kernels = BrokenKernels  # type: ignore[method-assign]
        calls = 0
        while calls < 20:
            calls += 1
            _, _, _, _, info = env.step(ToolCall(tool="try_cell", args={"code": "x = 1"}))
            if info.get("tool_refused"):
                break
            assert info.get("infrastructure_error"), info
        assert calls == MAX_TOOL_REFUNDS + budget + 1, "refunded up to the cap, then the budget, then refused"
    finally:
        env.close()
