"""A verifiers environment (PrimeIntellect's ``verifiers`` 0.4, ``verifiers.v1``: ``vf-eval``, prime-rl).

``vf-eval themisto-env`` loads the taskset and harness the package exports (``themisto_env.ThemistoTaskset``,
``themisto_env.ThemistoHarness``). Each rollout is a [`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv]
on its sample with the TRL tool env's tools, and its one reward is that rollout's ``get_reward()``, so
verifiers scores what TRL scores. From Python, `load_environment` gives the ``verifiers.v1`` env; how
verifiers runs it is in `themisto_env.bridges.vf_taskset`, usage in docs/rl.md. ``verifiers`` is imported
on first use (``pip install 'themisto-env[verifiers]'``).
"""

from __future__ import annotations

from typing import Any

from themisto_env.errors import import_extra

__all__ = ["TASKSET_ID", "load_environment"]

#: The id verifiers loads the taskset by (``vf-eval themisto-env``, ``--env.taskset.id themisto-env``).
TASKSET_ID = "themisto-env"


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
        **env_options: [`EnvConfig`][themisto_env.env.EnvConfig] options as JSON values (``dataset`` a
            folder, ``backend``, ``tool_budget``, ``tool_cost``, ``history_length``, ``execution_score``,
            ``split``, ...): they reach the tool server's process through verifiers' config.

    Returns:
        A ``verifiers.v1.SingleAgentEnv`` whose agent runs on this machine (the subprocess runtime).

    Raises:
        ProviderError: verifiers 0.4 is not installed.
    """
    vf = import_extra("verifiers.v1", "verifiers", name="verifiers 0.4")

    config = vf.resolve_env_config(
        {
            "taskset": {
                "id": TASKSET_ID,
                "themisto_task": task,
                "limit": limit,
                "share": share,
                "options": env_options,
            },
            "agent": {"runtime": {"type": "subprocess"}, "max_turns": max_turns},
        }
    )
    return vf.load_environment(config)
