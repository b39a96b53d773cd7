"""Multi-turn RL with tools: the env under ``gymnasium.vector``, with batched actions and observations.

[`make_vector_env`][themisto_env.bridges.rl.make_vector_env] runs ``num_envs`` copies of the env side by side,
in this process (``sync``) or one subprocess each (``async``), each copy with its kernel and the env's own
turns (`themisto_env.env.core`); copies move independently. A terminated copy resets under gymnasium's
autoreset mode (``next-step`` or ``same-step``, docs/rl.md). `batch_actions` builds the batched action from
[`Prediction`][themisto_env.env.Prediction] / [`ToolCall`][themisto_env.env.tools.ToolCall] objects, and
`unbatch_observations` splits the observations back per copy.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from themisto_env.env.actions import Action, encode_action, parse_action
from themisto_env.errors import ConfigError

ENV_IDS = {"next-cell": "themisto/NextCell-v0", "output": "themisto/OutputPrediction-v0"}
_AUTORESET = {"next-step": "NextStep", "same-step": "SameStep", "disabled": "Disabled"}


def make_vector_env(
    num_envs: int = 2,
    *,
    task: str = "next-cell",
    vectorization: Literal["sync", "async"] = "sync",
    autoreset: Literal["next-step", "same-step", "disabled"] = "next-step",
    **options: Any,
) -> gym.vector.VectorEnv:
    """``num_envs`` copies of the env as one gymnasium vector env.

    Args:
        num_envs: How many copies (each with its own kernel).
        task: ``next-cell`` or ``output``.
        vectorization: ``sync`` (one process) or ``async`` (a subprocess per copy).
        autoreset: gymnasium's autoreset mode for a terminated copy: ``next-step`` (gymnasium's default)
            resets it on its next step and ignores that step's action (reward 0: mask that transition),
            ``same-step`` within the terminating step (the last observation in ``info["final_obs"]``).
        **options: [`EnvConfig`][themisto_env.env.EnvConfig] options for every copy (``observation``,
            ``tool_budget``, ``dataset``, ``backend``, ...).

    Returns:
        A ``SyncVectorEnv`` or ``AsyncVectorEnv``; close it when done (that closes the kernels).

    Raises:
        ConfigError: An unknown task, vectorization or autoreset mode.
    """
    import themisto_env  # noqa: F401  (registers the ids)

    if task not in ENV_IDS:
        raise ConfigError(f"task must be one of {sorted(ENV_IDS)}, got {task!r}")
    if autoreset not in _AUTORESET:
        raise ConfigError(f"autoreset must be one of {sorted(_AUTORESET)}, got {autoreset!r}")
    if num_envs < 1:
        raise ConfigError(f"num_envs must be at least 1, got {num_envs}")
    make = functools.partial(gym.make, ENV_IDS[task], **options)
    mode = gym.vector.AutoresetMode(_AUTORESET[autoreset])
    if vectorization == "sync":
        return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=mode)
    if vectorization == "async":
        return gym.vector.AsyncVectorEnv([make] * num_envs, autoreset_mode=mode)
    raise ConfigError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")


def batch_actions(actions: Sequence[Action | Mapping[str, Any]]) -> dict[str, Any]:
    """One action per copy (``ToolCall``, ``Prediction`` or action dicts) as a vector env's action.

    Raises:
        ActionError: An action is malformed.
    """
    encoded = [encode_action(parse_action(a)) for a in actions]
    return {
        "kind": np.array([a["kind"] for a in encoded], dtype=np.int64),
        "tool": np.array([a["tool"] for a in encoded], dtype=np.int64),
        "args": tuple(a["args"] for a in encoded),
        "text": tuple(a["text"] for a in encoded),
    }


def unbatch_observations(observations: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A vector env's batched observation as one observation dict per copy."""
    fields = list(observations)
    n = len(observations[fields[0]])
    return [
        {f: (int(observations[f][i]) if f == "tools_left" else observations[f][i]) for f in fields} for i in range(n)
    ]


def unbatch_info(infos: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """A vector env's batched info as one dict per copy (only the keys each copy set)."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}", np.ones(n, dtype=bool))
        per_copy = unbatch_info(values, n) if isinstance(values, Mapping) else values
        for i in range(n):
            if mask[i]:
                out[i][key] = per_copy[i]
    return out
