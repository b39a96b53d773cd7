"""Train a tiny language model with GRPO (TRL) on themisto-env's reward, on the CPU, in minutes.

It proves the plumbing, not the model: a task's samples are exported as a ``datasets.Dataset``
(``themisto_env.bridges.rl.export_dataset``), a byte-level BPE tokenizer is trained on them and a Llama-style
model of a few hundred thousand parameters is built from a config (nothing is downloaded), and TRL's
``GRPOTrainer`` runs a few steps with the env's metric reward (``themisto_env.bridges.rl.MetricReward``). The
reward curve is saved as a PNG and the log history as JSON.

It trains on the ``train`` side of the dataset's split and ends by scoring the trained model's greedy
completions on the ``test`` side (``themisto data split``; by trajectory, test 0.2, seed 0 when none was
written), so the figure it reports is on trajectories it never saw (``--split NAME`` for a named split,
``--split none`` to train on everything and skip the test)::

    pip install torch==2.13.0 && pip install -e '.[rl]'
    python examples/train_grpo.py --out runs/grpo                 # the bundled data, next-cell task
    python examples/train_grpo.py --data DIR --task output --steps 20

With a real model, swap `tiny_causal_lm` for ``AutoModelForCausalLM.from_pretrained(...)`` and
the trained tokenizer for its own; the dataset and the reward stay the same.
"""

from __future__ import annotations

import argparse
import json
import math
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

from themisto_env.bridges.rl import MetricReward, export_dataset


def train(
    out: str | Path,
    *,
    data: str | None = None,
    snapshot_dir: str | None = None,
    task: str = "next-cell",
    steps: int = 8,
    samples: int | None = 64,
    history_length: int = 2,
    num_generations: int = 4,
    prompts_per_step: int = 2,
    max_completion_length: int = 24,
    learning_rate: float = 3e-3,
    seed: int = 0,
    split: str | None = "default",
) -> dict[str, Any]:
    """Run a few GRPO steps on a tiny model and save the reward curve.

    Args:
        out: Folder for ``reward_curve.png``, ``log_history.json`` and ``summary.json``.
        data: A built dataset folder (default: the bundled data).
        snapshot_dir: Its snapshot store (default: the cache's).
        task: ``next-cell`` or ``output``.
        steps: Optimizer steps.
        samples: Use this many samples, spread over the trajectories as ``themisto run --limit`` takes them
            (None: all).
        history_length: Executions shown in each prompt (short prompts keep the CPU run fast).
        num_generations: Completions per prompt (GRPO's group size).
        prompts_per_step: Prompts per optimizer step.
        max_completion_length: Tokens generated per completion.
        learning_rate: The optimizer's learning rate.
        seed: Seed of the model, sampling and data order.
        split: The dataset's split to train on the ``train`` side of and test on the ``test`` side of
            (``default``, or a name ``themisto data split --name`` wrote); None trains on every sample.

    Returns:
        A summary: rewards per step, seconds, parameter count, the test side's mean reward, paths written.
    """
    # TRL asks the model whether it checkpoints under the name transformers 5 deprecates: not ours to mend
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer

    set_seed(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"dataset": data, "history_length": history_length}
    if snapshot_dir:
        options["snapshot_dir"] = snapshot_dir
    side = (lambda name: name if split == "default" else f"{split}:{name}") if split else None
    dataset = export_dataset(
        task, "static", prompt_format="text", limit=samples, split=side("train") if side else None, **options
    )
    tokenizer = train_tokenizer(list(dataset["prompt"]) + list(dataset["target"]), vocab_size=1024)
    model = tiny_causal_lm(tokenizer, seed=seed)

    config = GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=steps,
        per_device_train_batch_size=num_generations * prompts_per_step,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,
        temperature=1.0,
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
        reward_funcs=[MetricReward(task=task, split=side("train") if side else None, dataset=data)],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started

    test = None
    if side:  # the trained policy on trajectories it never saw
        held_out = export_dataset(task, "static", prompt_format="text", split=side("test"), **options)
        scorer = MetricReward(task=task, split=side("test"), dataset=data)
        test = evaluate(model, tokenizer, held_out, scorer, max_completion_length)

    history = trainer.state.log_history
    curve = reward_curve(history)
    plot = plot_reward_curve(history, out / "reward_curve.png", title=f"GRPO on themisto {task} (tiny model)")
    (out / "log_history.json").write_text(json.dumps(history, indent=2, default=str) + "\n")
    summary = {
        "task": task,
        "samples": len(dataset),
        "split": split,
        "train_sample_ids": list(dataset["sample_id"]),
        "test": test,
        "parameters": parameter_count(model),
        "vocab_size": len(tokenizer),
        "steps": steps,
        "train_seconds": round(seconds, 1),
        "rewards": [v for _, v in curve],
        "plot": str(plot),
        "finite": all(math.isfinite(v) for _, v in curve),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def evaluate(model: Any, tokenizer: Any, rows: Any, reward: MetricReward, max_new_tokens: int) -> dict[str, Any]:
    """The model's greedy completion of each row's prompt, scored by ``reward`` (the rows' split checked).

    Returns:
        The number of samples, their mean reward and their sample ids.
    """
    import torch

    model.eval()
    completions = []
    with torch.no_grad():
        for prompt in rows["prompt"]:
            encoded = tokenizer(prompt, return_tensors="pt")
            generated = model.generate(
                **encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
            new = generated[0, encoded["input_ids"].shape[1] :]
            completions.append(tokenizer.decode(new, skip_special_tokens=True))
    rewards = reward(completions=completions, target=rows["target"], task=rows["task"], sample_id=rows["sample_id"])
    return {
        "samples": len(rewards),
        "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
        "sample_ids": list(rows["sample_id"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/grpo", help="output folder (default: runs/grpo)")
    parser.add_argument("--data", default=None, help="a built dataset folder (default: the bundled data)")
    parser.add_argument("--snapshot-dir", default=None, help="its snapshot store (default: the cache's)")
    parser.add_argument("--task", default="next-cell", choices=["next-cell", "output"])
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps (default: 8)")
    parser.add_argument("--samples", type=int, default=64, help="N samples, spread (default: 64; 0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--split", default="default", help="train on its train side, test on its test side (default: default; none)"
    )
    args = parser.parse_args()
    summary = train(
        args.out,
        data=args.data,
        snapshot_dir=args.snapshot_dir,
        task=args.task,
        steps=args.steps,
        samples=args.samples or None,
        seed=args.seed,
        split=None if args.split == "none" else args.split,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
