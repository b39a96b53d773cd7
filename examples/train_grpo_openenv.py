"""Multi-turn GRPO against a running ``themisto serve``: the trainer imports no kernel, only a client.

The in-process version is ``examples/train_grpo_tools.py``; here each TRL rollout is a
`RemoteRollout`, one WebSocket session of a themisto OpenEnv server (its own episode and kernel on the
server): ``reset(**row)`` starts the session at the row's sample, the model's tool calls are steps of
that session answered from the server's live kernel, ``submit`` keeps the prediction, and ``get_reward()``
submits it as the session's prediction step and returns the reward the server's env pays
(``info["reward"]``: the one ``score_sample``; None when the server flags the sample as untrusted).

Start the server first (``--max-sessions`` at least the generation batch: prompts per step times
generations), then train::

    themisto serve --port 8000 --max-sessions 8 --split train &
    python examples/train_grpo_openenv.py --url http://127.0.0.1:8000 --steps 2

It trains on the ``train`` side of the bundled data's split (``--split``; the server started with ``--split
train`` refuses any other sample), so ``themisto run --split test`` scores a policy on trajectories it never
saw.

The prompts (the history of each sample) and the warm start's demonstrations come from the trainer's own
copy of the data (the bundled data here); the server is asked only for states, tool answers and rewards.
The tiny model, tokenizer and warm start are those of ``train_grpo_tools.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_grpo_tools, beside this file

from tiny_model import parameter_count, reward_curve, tiny_causal_lm, train_tokenizer
from train_grpo_tools import TEMPLATE_SPECIALS, demonstration, warm_start

from themisto_env.bridges.openenv.client import ThemistoEnvClient
from themisto_env.bridges.openenv.models import ThemistoAction
from themisto_env.bridges.rl.tool_env import ROLLOUT_TOOLS, SUBMIT_INSTRUCTION, tool_dataset, tool_methods
from themisto_env.env.tools import SUBMIT, tool_method

__all__ = ["RemoteRollout", "train"]


class RemoteRollout:
    """One rollout for ``GRPOTrainer(environment_factory=...)`` over a themisto OpenEnv server session.

    Its tools are the in-process rollout's (`ROLLOUT_TOOLS`, methods made from the env's tool table), each
    call a tool step of the session: the server's env counts it, refuses it past the budget, and answers.
    It ends the session through ``with`` (TRL offers every public method to the model, so ``close`` is not one).

    Args:
        url: The server (``http://HOST:PORT``).
        token: Its token, if it was started with one.
    """

    def __init__(self, url: str, token: str | None = None) -> None:
        self._session = ThemistoEnvClient(url, token=token).sync()
        self._session.connect()
        self.answer: str | None = None
        self.task = "next-cell"
        self.last_info: dict[str, Any] = {}

    # -- TRL's contract ----------------------------------------------------------------------------------

    def reset(self, **row: Any) -> str:
        """Start the session's episode at the row's sample (tools mode). Returns the submit instruction."""
        result = self._session.reset(sample_id=row["sample_id"], observation="tools")
        self.task = str(result.observation.info["task"])
        self.answer, self.last_info = None, {}
        return SUBMIT_INSTRUCTION

    def get_reward(self) -> float | None:
        """Submit the last prediction (empty if none) as the session's prediction step; the server's reward
        for the sample (None: untrusted, TRL leaves it out)."""
        from themisto_env.agents.parsing import extract_prediction

        text = extract_prediction(self.answer, self.task) if self.answer else ""  # type: ignore[arg-type]
        result = self._session.step(ThemistoAction.predict(text))
        self.last_info = result.observation.info
        return self.last_info.get("reward")

    # -- inside ---------------------------------------------------------------------------------------------

    def _call(self, tool: str, args: dict[str, Any]) -> str:
        """A tool method's answer: the submission is kept for ``get_reward``; any other tool is a step."""
        if tool == SUBMIT.name:
            self.answer = str(SUBMIT.args_model.model_validate(args).prediction)  # type: ignore[attr-defined]
            return "Prediction recorded."
        return self._session.step(ThemistoAction.call(tool, **args)).observation.tool_result

    def __enter__(self) -> RemoteRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        """End the session (the server closes its kernel)."""
        self._session.close()


for _tool in ROLLOUT_TOOLS:  # the model's tools: methods made from the env's tool table
    setattr(RemoteRollout, _tool.name, tool_method(_tool, RemoteRollout._call))


def train(
    url: str,
    out: str | Path,
    *,
    token: str | None = None,
    task: str = "next-cell",
    steps: int = 2,
    samples: int = 4,
    tool_budget: int = 2,
    num_generations: int = 2,
    prompts_per_step: int = 2,
    max_completion_length: int = 128,
    warm_start_steps: int = 60,
    seed: int = 0,
    split: str | None = "train",
) -> dict[str, Any]:
    """Run a few GRPO steps of the tiny model against the server at ``url``; write ``summary.json`` and
    ``log_history.json`` into ``out``. The server's tool budget must be at least ``tool_budget``."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from themisto_env.replay.dataset import Dataset

    set_seed(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    dataset = tool_dataset(task, limit=samples, history_length=1, tool_budget=tool_budget, split=split)
    local = Dataset.open(split=split)
    sessions = contextlib.ExitStack()
    rollouts: list[RemoteRollout] = []

    def factory() -> RemoteRollout:
        rollouts.append(sessions.enter_context(RemoteRollout(url, token)))
        return rollouts[-1]

    with sessions:
        probe = factory()
        # demonstrations: a real tool answer from the server, then the recorded target
        conversations = [demonstration(probe, row, local.sample(row["sample_id"]).target) for row in dataset]
        tokenizer = train_tokenizer(
            [json.dumps(c) for c in conversations],
            vocab_size=1024,
            chat_template=qwen2_5_chat_template,
            specials=TEMPLATE_SPECIALS,
            eos="<|im_end|>",
        )
        model = tiny_causal_lm(tokenizer, seed=seed)
        tools = tool_methods(probe)  # what TRL offers the model
        losses = warm_start(model, tokenizer, conversations, tools, steps=warm_start_steps, learning_rate=1e-2)
        config = GRPOConfig(
            output_dir=str(out / "trainer"),
            max_steps=steps,
            per_device_train_batch_size=num_generations * prompts_per_step,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
            max_tool_calling_iterations=tool_budget + 1,
            learning_rate=3e-3,
            temperature=0.7,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            bf16=False,
            seed=seed,
            dataloader_num_workers=0,
            disable_tqdm=True,
            activation_checkpointing=False,
        )
        trainer = GRPOTrainer(
            model=model, args=config, train_dataset=dataset, processing_class=tokenizer, environment_factory=factory
        )
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    history = trainer.state.log_history
    curve = reward_curve(history)
    (out / "log_history.json").write_text(json.dumps(history, indent=2, default=str) + "\n")
    summary = {
        "server": url,
        "task": task,
        "samples": len(dataset),
        "sessions": len(rollouts),
        "parameters": parameter_count(model),
        "steps": steps,
        "warm_start_loss": [round(losses[0], 3), round(losses[-1], 3)] if losses else [],
        "train_seconds": round(seconds, 1),
        "rewards": [v for _, v in curve],
        "tool_calls": [v for _, v in reward_curve(history, "tools/call_frequency")],
        "finite": all(math.isfinite(v) for _, v in curve),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the themisto serve server")
    parser.add_argument("--token", default=os.environ.get("THEMISTO_SERVE_TOKEN"), help="its token, if any")
    parser.add_argument("--out", default="runs/grpo-openenv", help="output folder (default: runs/grpo-openenv)")
    parser.add_argument("--task", default="next-cell", choices=["next-cell", "output"])
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (default: 2)")
    parser.add_argument("--samples", type=int, default=4, help="samples, spread over the trajectories (default: 4)")
    parser.add_argument("--warm-start", type=int, default=60, help="supervised warm-start steps (default: 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="train", help="the side of the data's split to train on (none: all)")
    args = parser.parse_args()
    summary = train(
        args.url,
        args.out,
        token=args.token,
        task=args.task,
        steps=args.steps,
        samples=args.samples,
        warm_start_steps=args.warm_start,
        seed=args.seed,
        split=None if args.split == "none" else args.split,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
