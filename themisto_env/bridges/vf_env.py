"""A verifiers environment (PrimeIntellect's ``verifiers``: ``vf-eval``, prime-rl): :func:`load_environment`.

It is a ``vf.StatefulToolEnv`` over the same tools and the same score as the TRL tool env
(:mod:`themisto_env.bridges.rl.tool_env`): each rollout is a
:class:`~themisto_env.bridges.rl.tool_env.ThemistoToolEnv` on the row's sample (the rollouts of a sample
share one kernel in its state), the model calls the observation tools and ``submit``; the rubric's one
reward is that rollout's ``get_reward()``, i.e. :func:`~themisto_env.scoring.score.score_sample` (0 for a
rollout the env cannot trust, with the metric ``untrusted`` = 1 beside it). The rows are the prompts of
``tool_dataset`` (the history and the tool invitation; no target) with the sample id in ``info``::

    import verifiers as vf
    from themisto_env.bridges.vf_env import load_environment

    env = load_environment(task="next-cell", limit=20)
    results = env.evaluate_sync(client=openai_client, model="...", num_examples=20)

``verifiers`` is imported on first use (``pip install verifiers``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from themisto_env.bridges.rl.tool_env import SUBMIT_INSTRUCTION, SharedStates, ThemistoToolEnv, tool_dataset
from themisto_env.errors import ProviderError

__all__ = ["TOOL_NAMES", "load_environment"]

TOOL_NAMES = (
    "list_variables",
    "inspect_variable",
    "dataframe_head",
    "dataframe_info",
    "memory_usage",
    "get_source",
    "submit",
)
"""The model's tools: :class:`ThemistoToolEnv`'s methods, with their signatures and docstrings."""


def load_environment(
    task: str = "next-cell",
    *,
    limit: int | None = None,
    max_turns: int = 8,
    share: bool = True,
    **env_options: Any,
) -> Any:
    """The themisto verifiers environment (see the module docstring).

    Args:
        task: ``next-cell`` or ``output``.
        limit: Use this many samples, spread over the trajectories (None: all).
        max_turns: Model turns per rollout (tool calls included).
        share: The rollouts of a sample share one kernel (False: one per rollout).
        **env_options: :class:`~themisto_env.env.core.EnvConfig` options (``dataset``, ``backend``,
            ``tool_budget``, ``tool_cost``, ``history_length``, ``execution_score``, ...).

    Returns:
        A ``verifiers.StatefulToolEnv``.

    Raises:
        ProviderError: verifiers is not installed.
    """
    try:
        import verifiers as vf
    except ImportError as exc:
        raise ProviderError(f"verifiers is not installed ({exc}): pip install verifiers") from None
    from datasets import Dataset

    states = SharedStates(task=task, share=share, **env_options)
    rows = [
        {
            "prompt": _with_instruction(row["prompt"]),
            "answer": "",  # the target stays with the env: the rubric scores through it
            "info": {"sample_id": row["sample_id"]},
            "task": f"themisto-{task}",
        }
        for row in tool_dataset(task, limit=limit, **env_options)
    ]

    async def themisto_reward(state: Any, **kwargs: Any) -> float:
        """The env's one score of the rollout's last submission (0 when it cannot be trusted)."""
        reward = state["themisto"].get_reward()
        return 0.0 if reward is None else float(reward)

    async def untrusted(state: Any, **kwargs: Any) -> float:
        """1 when an infrastructure failure or a state mismatch touched the rollout (its reward is 0)."""
        return 1.0 if state["themisto"].untrusted else 0.0

    rubric = vf.Rubric(funcs=[themisto_reward], weights=[1.0])
    rubric.add_metric(untrusted)

    class ThemistoVerifiersEnv(vf.StatefulToolEnv):  # type: ignore[misc,name-defined]
        """Rollouts over the live state of a sample (one :class:`ThemistoToolEnv` each)."""

        async def setup_state(self, state: Any, **kwargs: Any) -> Any:
            rollout = ThemistoToolEnv(states)
            rollout.reset(sample_id=state["info"]["sample_id"])
            state["themisto"] = rollout
            return await super().setup_state(state, **kwargs)

        def update_tool_args(
            self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: Any, **kwargs: Any
        ) -> dict[str, Any]:
            return {**tool_args, "rollout": state["themisto"]}

        @vf.teardown
        async def close_states(self) -> None:
            states.close()

    # no env_id: vf-eval sets it to the id it loaded this module by, and its workers load it again by that
    env = ThemistoVerifiersEnv(tools=[], max_turns=max_turns, dataset=Dataset.from_list(rows), rubric=rubric)
    for name in TOOL_NAMES:
        env.add_tool(_tool(name), args_to_skip=["rollout"])
    return env


def _with_instruction(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prompt with the submit instruction appended to its last message (as TRL appends ``reset``'s)."""
    messages = [dict(message) for message in prompt]
    messages[-1]["content"] = f"{messages[-1]['content']}{SUBMIT_INSTRUCTION}"
    return messages


def _tool(name: str) -> Any:
    """A function the model can call: ``ThemistoToolEnv.<name>``'s signature and docstring, with the rollout
    as a hidden argument (``update_tool_args`` fills it in)."""
    method = getattr(ThemistoToolEnv, name)
    signature = inspect.signature(method)
    hidden = inspect.Parameter("rollout", inspect.Parameter.KEYWORD_ONLY, annotation=Any)
    parameters = [p for p in signature.parameters.values() if p.name != "self"]

    @functools.wraps(method)
    def call(*args: Any, rollout: ThemistoToolEnv, **kwargs: Any) -> str:
        return str(getattr(rollout, name)(*args, **kwargs))

    call.__signature__ = signature.replace(parameters=[*parameters, hidden])  # type: ignore[attr-defined]
    call.__annotations__ = {**getattr(method, "__annotations__", {}), "rollout": Any}
    call.__annotations__.pop("self", None)
    del call.__wrapped__  # type: ignore[attr-defined]  # the schema reads this signature, not the method's
    return call
