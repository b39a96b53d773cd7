"""A tokenizer and a causal language model small enough to train on a CPU in minutes, built offline.

No weights can be downloaded on the project's machines, so the training examples build their model here:
a byte-level BPE tokenizer trained with the ``tokenizers`` library on the exported prompts and targets
(wrapped as a ``transformers.PreTrainedTokenizerFast``, with a plain chat template), and a Llama-style
causal LM initialised from a config (a few hundred thousand parameters by default). It proves the
training plumbing, not the model. `plot_reward_curve` saves a training run's reward curve.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

EOS = "<|endoftext|>"
PAD = "<|pad|>"

#: A plain chat template: each message as "<|role|>\n content \n", then "<|assistant|>\n" to generate.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def train_tokenizer(
    texts: Iterable[str],
    *,
    vocab_size: int = 1024,
    chat_template: str | None = None,
    specials: Sequence[str] = (),
    eos: str = EOS,
) -> Any:
    """A byte-level BPE tokenizer trained on ``texts``, as a ``PreTrainedTokenizerFast``.

    Args:
        texts: Training text (e.g. the exported prompts and targets).
        vocab_size: Vocabulary size, special tokens included (at least 256 + 4: the bytes come first).
        chat_template: A chat template (default: the plain one); a tool-calling one (e.g. TRL's
            ``qwen2_5_chat_template``) for multi-turn tool use.
        specials: Further special tokens (the template's markers, e.g. ``<|im_start|>``).
        eos: The end-of-sequence token (one of the specials; a chat template's end-of-turn marker).

    Returns:
        The tokenizer, with ``eos`` (default ``<|endoftext|>``), ``bos`` ``<|endoftext|>``, ``pad``
        ``<|pad|>``, left padding and the chat template.
    """
    import tokenizers
    import transformers

    specials = list(dict.fromkeys([EOS, PAD, "<|system|>", "<|user|>", "<|assistant|>", *specials, eos]))
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    wrapped = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, bos_token=EOS, pad_token=PAD, padding_side="left"
    )
    wrapped.chat_template = chat_template or CHAT_TEMPLATE
    return wrapped


def tiny_causal_lm(
    tokenizer: Any,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 8192,
    seed: int = 0,
) -> Any:
    """A randomly initialised Llama-style causal LM sized for a CPU.

    Args:
        tokenizer: Its tokenizer (gives the vocabulary size and the special token ids).
        hidden_size: Width of the model.
        layers: Transformer blocks.
        heads: Attention heads (``hidden_size`` must divide by it).
        max_positions: Longest sequence (rotary positions: no parameters per position).
        seed: Seed of the initialisation.

    Returns:
        A ``transformers.LlamaForCausalLM`` in training mode on the CPU.
    """
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def parameter_count(model: Any) -> int:
    """The number of parameters of a torch model."""
    return sum(p.numel() for p in model.parameters())


def reward_curve(log_history: Sequence[dict[str, Any]], key: str = "reward") -> list[tuple[int, float]]:
    """(step, mean reward) pairs from a trainer's ``state.log_history``."""
    return [(int(row["step"]), float(row[key])) for row in log_history if key in row and "step" in row]


def plot_reward_curve(
    log_history: Sequence[dict[str, Any]], path: str | Path, *, key: str = "reward", title: str | None = None
) -> Path:
    """Save the reward curve of a training run (from ``trainer.state.log_history``) as a PNG.

    Args:
        log_history: The trainer's log history (one dict per logging step).
        path: The PNG to write.
        key: The logged value to plot (TRL's GRPO logs the mean reward as ``reward``, its spread as
            ``reward_std``, and each reward function as ``rewards/<name>/mean``).
        title: The plot's title.

    Returns:
        The path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = reward_curve(log_history, key)
    spread = dict(reward_curve(log_history, f"{key}_std"))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [s for s, _ in curve]
    values = [v for _, v in curve]
    ax.plot(steps, values, marker="o", label=f"mean {key}")
    if spread:
        low = [v - spread.get(s, 0.0) for s, v in curve]
        high = [v + spread.get(s, 0.0) for s, v in curve]
        ax.fill_between(steps, low, high, alpha=0.2, label="± std over completions")
    ax.set_xlabel("training step")
    ax.set_ylabel(key)
    ax.set_ylim(bottom=min([0.0, *values]))
    ax.set_title(title or "GRPO reward")
    ax.legend(loc="best")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
