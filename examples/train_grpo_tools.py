"""Multi-turn GRPO with tools (TRL's ``environment_factory``): a tiny model queries the live kernel state.

Each rollout is a [`themisto_env.bridges.rl.tool_env.ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv]: the
model sees a sample's history, may call the observation tools (``list_variables``, ``inspect_variable``,
``dataframe_head``, ...), answered from a real kernel in the sample's recorded state, gives its prediction with
``submit``, and ``get_reward()`` scores it with the env's metrics. The rollouts of one sample (a GRPO group) share one
kernel in that state (``--no-share``: a kernel per rollout).

It proves the plumbing, not the model: a byte-level BPE tokenizer with TRL's Qwen2.5 tool-calling chat
template and a Llama-style model of a few hundred thousand parameters are built here (nothing is
downloaded); a short supervised warm start on demonstrations (one tool call, then ``submit`` with the
recorded cell) teaches the tiny model the tool-call format, so that GRPO sees real tool calls. The reward
curve is saved as a PNG, the log history and a summary as JSON::

    pip install torch==2.13.0 && pip install -e '.[rl]'
    python examples/train_grpo_tools.py --out runs/grpo-tools               # the bundled data
    python examples/train_grpo_tools.py --steps 20 --execution-score       # also run each prediction

It trains on the ``train`` side of the dataset's split (``--split NAME``; ``default``: the written one, or by
trajectory, test 0.2, seed 0) and ends with ``trainer.evaluate()`` on the ``test`` side: each row names its
side's environment (TRL's dict ``environment_factory``), so test rows are served and scored by states that
serve only the test side, and train rows by states that serve only train (``--split none``: everything,
no test).

With a real model, load it and its tokenizer with ``from_pretrained`` instead (its own chat template
must support tools) and skip the warm start; the dataset, the environment and the reward stay the same.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

from tiny_model import (
    parameter_count,
    plot_reward_curve,
    reward_curve,
    tiny_causal_lm,
    train_tokenizer,
)

from themisto_env.bridges.rl.tool_env import SharedStates, ThemistoToolEnv, tool_dataset, tool_methods
from themisto_env.env.tools import SUBMIT, TOOLS

#: Special tokens of the Qwen2.5 chat template (the end-of-turn marker ends a completion).
TEMPLATE_SPECIALS = ("<|im_start|>", "<|im_end|>")
#: The tool the demonstrations call before they submit (it takes no arguments and answers in every state).
LISTING = TOOLS["list_variables"]


def demonstrations(states: SharedStates, rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Conversations that call `LISTING` (its real answer, from the kernel) and then submit the recorded
    cell: what the warm start teaches."""
    rollout = ThemistoToolEnv(states)
    return [demonstration(rollout, row, states.samples[row["sample_id"]].target) for row in rows]


def demonstration(rollout: Any, row: dict[str, Any], target: str) -> list[dict[str, Any]]:
    """One conversation on ``rollout`` (reset to ``row``): `LISTING` with its real answer, then `SUBMIT` with
    ``target``, each answered as the rollout answers it."""
    rollout.reset(**row)
    answer = getattr(rollout, LISTING.name)()
    submitted = getattr(rollout, SUBMIT.name)(target)
    return [
        *row["prompt"],
        _call(LISTING.name, {}),
        {"role": "tool", "name": LISTING.name, "content": answer},
        _call(SUBMIT.name, {next(iter(SUBMIT.args_model.model_fields)): target}),
        {"role": "tool", "name": SUBMIT.name, "content": submitted},
        {"role": "assistant", "content": "Done."},
    ]


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def warm_start(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict[str, Any]]],
    tools: list[Any],
    *,
    steps: int,
    learning_rate: float,
) -> list[float]:
    """A few supervised steps on the demonstrations (next-token loss on the assistant's turns: the tool
    call, the ``submit`` call with the recorded cell, the closing words)."""
    import torch

    batches = []
    for conversation in conversations:
        full: list[int] = []
        labels: list[int] = []
        for i, message in enumerate(conversation):  # label the assistant turns only
            if message["role"] != "assistant":
                continue
            head = _ids(tokenizer.apply_chat_template(conversation[:i], tools=tools, add_generation_prompt=True))
            upto = _ids(tokenizer.apply_chat_template(conversation[: i + 1], tools=tools))
            labels += [-100] * (len(head) - len(full)) + upto[len(head) :]
            full = upto
        batches.append((torch.tensor([full]), torch.tensor([labels])))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for i in range(steps):
        ids, labels = batches[i % len(batches)]
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _ids(encoded: Any) -> list[int]:
    """Token ids from ``apply_chat_template(..., tokenize=True)`` (a list, or a mapping with input_ids)."""
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def train(
    out: str | Path,
    *,
    data: str | None = None,
    snapshot_dir: str | None = None,
    task: str = "next-cell",
    steps: int = 6,
    samples: int | None = 8,
    history_length: int = 1,
    tool_budget: int = 2,
    num_generations: int = 4,
    prompts_per_step: int = 2,
    max_completion_length: int = 256,
    warm_start_steps: int = 300,
    warm_start_lr: float = 1e-2,
    temperature: float = 0.7,
    share: bool = True,
    execution_score: bool = False,
    learning_rate: float = 3e-3,
    seed: int = 0,
    split: str | None = "default",
) -> dict[str, Any]:
    """Run a few multi-turn GRPO steps on a tiny model through
    [`ThemistoToolEnv`][themisto_env.bridges.rl.ThemistoToolEnv].

    Args:
        out: Folder for ``reward_curve.png``, ``log_history.json`` and ``summary.json``.
        data: A built dataset folder (default: the bundled data).
        snapshot_dir: Its snapshot store (default: the cache's).
        task: ``next-cell`` or ``output``.
        steps: Optimizer steps.
        samples: Use this many samples, spread over the trajectories as ``themisto run --limit`` takes them
            (None: all).
        history_length: Executions shown in each prompt.
        tool_budget: Tool calls per rollout.
        num_generations: Completions per prompt (GRPO's group size).
        prompts_per_step: Prompts per optimizer step.
        max_completion_length: Tokens per rollout, tool answers included.
        warm_start_steps: Supervised steps on demonstrations before GRPO (0: none).
        warm_start_lr: Their learning rate.
        temperature: Sampling temperature of the rollouts.
        share: The rollouts of a sample share one kernel (False: one per rollout).
        execution_score: Also score each prediction by running it (a disposable kernel).
        learning_rate: The optimizer's learning rate.
        seed: Seed of the model, sampling and data order.
        split: Train on the ``train`` side of this split of the dataset (``default``, or a name ``themisto
            data split --name`` wrote); None trains on every sample.

    Returns:
        A summary: rewards and tool calls per step, seconds, parameter count, kernels used, paths written.
    """
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # TRL asks the model whether it checkpoints under the name transformers 5 deprecates: not ours to mend
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    set_seed(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"dataset": data, "history_length": history_length, "tool_budget": tool_budget}
    if snapshot_dir:
        options["snapshot_dir"] = snapshot_dir
    held_out: dict[str, Any] | None = None
    if split:  # train on the split's train side; the test side is served by states of its own, for the evaluation
        held_out = {**options, "split": "test" if split == "default" else f"{split}:test"}
        options["split"] = "train" if split == "default" else f"{split}:train"
    states = SharedStates(task=task, share=share, execution_score=execution_score, **options)
    test_states = (
        SharedStates(task=task, share=share, execution_score=execution_score, **held_out) if held_out else None
    )
    try:
        dataset = tool_dataset(task, limit=samples, **options)
        rows = list(dataset)
        eval_dataset = None
        factory: Any = states.factory()
        if test_states is not None:  # each row names its side's environment (TRL routes rows by this column)
            eval_dataset = tool_dataset(task, limit=samples, **held_out)  # type: ignore[arg-type]
            eval_dataset = eval_dataset.add_column("environment", ["test"] * len(eval_dataset))
            dataset = dataset.add_column("environment", ["train"] * len(dataset))
            factory = {"train": states.factory(), "test": test_states.factory()}
        conversations = demonstrations(states, rows)
        texts = [json.dumps(c) for c in conversations]
        tokenizer = train_tokenizer(
            texts, vocab_size=1024, chat_template=qwen2_5_chat_template, specials=TEMPLATE_SPECIALS, eos="<|im_end|>"
        )
        model = tiny_causal_lm(tokenizer, seed=seed)
        probe = ThemistoToolEnv(states)
        tools = tool_methods(probe)  # what TRL offers the model
        started = time.perf_counter()
        losses = warm_start(model, tokenizer, conversations, tools, steps=warm_start_steps, learning_rate=warm_start_lr)
        warm_seconds = time.perf_counter() - started

        config = GRPOConfig(
            output_dir=str(out / "trainer"),
            max_steps=steps,
            per_device_train_batch_size=num_generations * prompts_per_step,
            per_device_eval_batch_size=num_generations * prompts_per_step,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
            max_tool_calling_iterations=tool_budget + 1,
            learning_rate=learning_rate,
            temperature=temperature,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            bf16=False,
            seed=seed,
            dataloader_num_workers=0,
            disable_tqdm=True,
            # TRL turns it on by default under its old name (a FutureWarning of transformers 5, and three
            # more from the calls it makes); a model this small needs no activation checkpointing
            activation_checkpointing=False,
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            eval_dataset=eval_dataset,
            processing_class=tokenizer,
            environment_factory=factory,
        )
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
        kernels = len(states._owned)
        test = None
        if eval_dataset is not None:  # the trained policy's rollouts on the test side, scored by its env
            metrics = trainer.evaluate()
            test = {
                "samples": len(eval_dataset),
                "reward": metrics.get("eval_reward"),
                "tool_calls": metrics.get("eval_tools/call_frequency"),
                "sample_ids": list(eval_dataset["sample_id"]),
            }
    finally:
        states.close()
        if test_states is not None:
            test_states.close()

    history = trainer.state.log_history
    curve = reward_curve(history)
    plot = plot_reward_curve(
        history, out / "reward_curve.png", title=f"multi-turn GRPO on themisto {task} (tiny model)"
    )
    (out / "log_history.json").write_text(json.dumps(history, indent=2, default=str) + "\n")
    summary = {
        "task": task,
        "samples": len(dataset),
        "split": options.get("split"),
        "train_sample_ids": [row["sample_id"] for row in rows],
        "test": test,
        "parameters": parameter_count(model),
        "vocab_size": len(tokenizer),
        "steps": steps,
        "share": share,
        "kernels": kernels,
        "warm_start_loss": [round(losses[0], 3), round(losses[-1], 3)] if losses else [],
        "warm_start_seconds": round(warm_seconds, 1),
        "train_seconds": round(seconds, 1),
        "rewards": [v for _, v in curve],
        "tool_calls": [v for _, v in reward_curve(history, "tools/call_frequency")],
        "plot": str(plot),
        "finite": all(math.isfinite(v) for _, v in curve),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/grpo-tools", help="output folder (default: runs/grpo-tools)")
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled data)")
    parser.add_argument("--snapshot-dir", default=None, help="its snapshot store (default: the cache's)")
    parser.add_argument("--task", default="next-cell", choices=["next-cell", "output"])
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps (default: 6)")
    parser.add_argument("--samples", type=int, default=8, help="N samples, spread (default: 8; 0: all)")
    parser.add_argument("--warm-start", type=int, default=300, help="supervised warm-start steps (default: 300)")
    parser.add_argument("--no-share", action="store_true", help="a kernel per rollout, not per group")
    parser.add_argument("--execution-score", action="store_true", help="also score predictions by running them")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="default", help="train on this split's train side (default; none: all)")
    args = parser.parse_args()
    summary = train(
        args.out,
        data=args.data,
        snapshot_dir=args.snapshot_dir,
        task=args.task,
        steps=args.steps,
        samples=args.samples or None,
        warm_start_steps=args.warm_start,
        share=not args.no_share,
        execution_score=args.execution_score,
        seed=args.seed,
        split=None if args.split == "none" else args.split,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
