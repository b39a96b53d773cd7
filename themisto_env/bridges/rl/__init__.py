"""Reinforcement learning adapters: single-turn datasets and rewards for TRL, multi-turn tool rollouts.

* `themisto_env.bridges.rl.export`: a task's samples as rows (prompt, target, sample id, metadata) or a
  Hugging Face ``datasets.Dataset``, the prompts built from the env's own observations.
* `themisto_env.bridges.rl.rewards`: reward functions with TRL's ``reward_funcs`` signature, scoring
  completions with the env's metrics ([`MetricReward`][themisto_env.bridges.rl.MetricReward]) or by running them
  ([`ExecutionReward`][themisto_env.bridges.rl.ExecutionReward]).
* `themisto_env.bridges.rl.tool_env`: multi-turn tool-calling GRPO, ``GRPOTrainer(environment_factory=...)``:
  each rollout queries the live state of its sample with the observation tools (a GRPO group shares one
  kernel) and submits a prediction that ``get_reward()`` scores.

Nothing heavy is imported here: ``datasets``, ``torch``, ``transformers`` and ``trl`` are imported when a
function needs them (``pip install 'themisto-env[rl]'``).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
