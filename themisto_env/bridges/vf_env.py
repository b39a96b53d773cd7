"""A verifiers environment (PrimeIntellect's ``verifiers`` 0.4, ``verifiers.v1``: ``vf-eval``, prime-rl).

The package is a verifiers environment: ``vf-eval themisto-env`` loads the taskset and harness it exports
(``themisto_env.ThemistoTaskset``, ``themisto_env.ThemistoHarness``; verifiers looks a taskset up by its
package's name, in ``__all__``). Its tasks are
the samples of a task, each prompt the one of ``tool_dataset`` (the history and the tool invitation; no
target) with the sample id beside it; the model calls the same tools as in the TRL tool env
(`ROLLOUT_TOOLS` of `themisto_env.bridges.rl.tool_env`, made from the tool table), observation tools and
``submit``, and each rollout is a
[`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv] on its sample (the rollouts of a sample share one
kernel in its state). The task's one reward is that rollout's ``get_reward()``, i.e.
[`score_sample`][themisto_env.scoring.score_sample] (0 for a rollout the env cannot trust, with the metric
``untrusted`` = 1 beside it). How verifiers runs it: `themisto_env.bridges.vf_taskset`.

From Python, `load_environment` gives the ``verifiers.v1`` env (on this machine: the subprocess
runtime)::

    from themisto_env.bridges.vf_env import load_environment

    env = load_environment(task="next-cell", limit=20)   # a verifiers.v1.SingleAgentEnv

``verifiers`` is imported on first use (``pip install 'themisto-env[verifiers]'``: verifiers 0.4).
"""

from __future__ import annotations

from typing import Any

from themisto_env.errors import ProviderError

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
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ProviderError(f"verifiers 0.4 is not installed ({exc}): pip install 'themisto-env[verifiers]'") from None

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
