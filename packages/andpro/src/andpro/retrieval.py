"""Metric B: a synthetic key-value retrieval task and a tiny Llama trained on it.

A prompt is ``L`` context tokens of noise with ``n_pairs`` key-value pairs ``k v`` at random
positions, then ``SEP q :`` and the answer ``v(q)``. Vocabulary (128): 0 pad, 1 ``SEP``, 2 ``:``,
3-31 noise, 32-79 keys, 80-127 values. The model is a 2-layer Llama (d=128, 4 query / 2 KV heads)
trained with the loss on the answer tokens only, several queries per training sequence.

Two evaluation protocols (both decode the answer from the compressed cache, never from prefill
logits, which see the full context):

- question-aware (the official ``pred.py``): prefill ``context SEP q`` under the press (the question
  is inside the window), then feed ``:`` and read the answer from its logits;
- question-agnostic (kvpress): prefill ``context`` under the press, then feed ``SEP q :``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

__all__ = ["RetrievalTask", "retrieval_accuracy", "retrieval_model", "train_retrieval_model"]

PAD, SEP, COLON = 0, 1, 2
NOISE = (3, 32)
KEYS = (32, 80)
VALUES = (80, 128)
VOCAB = 128


@dataclasses.dataclass
class RetrievalTask:
    """Generator of retrieval prompts.

    Attributes:
        context: context length ``L`` (noise + pairs).
        n_pairs: key-value pairs in the context (distinct keys, at most 48).
        guard: the last ``guard`` context tokens hold no pair (so answers are never in the window).
    """

    context: int = 128
    n_pairs: int = 8
    guard: int = 32

    def contexts(
        self, batch: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, L]`` contexts, ``[B, n_pairs]`` keys and ``[B, n_pairs]`` values."""
        if self.n_pairs > KEYS[1] - KEYS[0]:
            raise ValueError(f"n_pairs: at most {KEYS[1] - KEYS[0]}, got {self.n_pairs}")
        slots = (self.context - self.guard) // 2
        if self.n_pairs > slots:
            raise ValueError(f"n_pairs: {self.n_pairs} pairs do not fit in {slots} slots")
        ids = torch.randint(*NOISE, (batch, self.context), generator=generator)
        keys = torch.stack(
            [
                torch.randperm(KEYS[1] - KEYS[0], generator=generator)[: self.n_pairs]
                for _ in range(batch)
            ]
        )
        keys = keys + KEYS[0]
        values = torch.randint(*VALUES, (batch, self.n_pairs), generator=generator)
        for b in range(batch):
            where = torch.randperm(slots, generator=generator)[: self.n_pairs] * 2
            ids[b, where] = keys[b]
            ids[b, where + 1] = values[b]
        return ids, keys, values

    def training_batch(
        self, batch: int, n_queries: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` for next-token training: ``context (SEP q : v) * n_queries``, loss on ``v`` only."""
        ctx, keys, values = self.contexts(batch, generator)
        pick = torch.stack(
            [torch.randperm(self.n_pairs, generator=generator)[:n_queries] for _ in range(batch)]
        )
        q, v = keys.gather(1, pick), values.gather(1, pick)
        tail = torch.stack(
            [torch.full_like(q, SEP), q, torch.full_like(q, COLON), v], dim=-1
        ).reshape(batch, -1)
        seq = torch.cat([ctx, tail], 1)
        x, y = seq[:, :-1], seq[:, 1:].clone()
        mask = torch.zeros_like(y, dtype=torch.bool)
        answer_pos = self.context + 4 * torch.arange(n_queries) + 3  # index of v in seq
        mask[:, answer_pos - 1] = True
        y[~mask] = -100
        return x, y

    def eval_batch(
        self, batch: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, L]`` contexts, ``[B]`` query keys and ``[B]`` answers."""
        ctx, keys, values = self.contexts(batch, generator)
        pick = torch.randint(0, self.n_pairs, (batch, 1), generator=generator)
        return ctx, keys.gather(1, pick)[:, 0], values.gather(1, pick)[:, 0]


def retrieval_model(seed: int = 0):
    """A fresh 2-layer Llama (d=128, 4 query / 2 KV heads, vocab 128, SDPA)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def train_retrieval_model(
    task: RetrievalTask,
    steps: int = 3000,
    batch_size: int = 16,
    n_queries: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
):
    """Train :func:`retrieval_model` on ``task`` (answer-token loss). Returns ``(model, TrainResult)``."""
    from neurips25_core.models import train

    model = retrieval_model(seed)
    gen = torch.Generator().manual_seed(seed)
    res = train(
        model,
        lambda step: task.training_batch(batch_size, n_queries, gen),
        steps,
        lr=lr,
        seed=seed,
        progress=progress,
        desc="train retrieval model",
        warmup=steps // 20,
    )
    return model, res


def load_or_train(
    path: Path,
    task: RetrievalTask,
    steps: int,
    seed: int = 0,
    n_queries: int = 8,
    progress: bool = True,
):
    """Load the committed fp16 checkpoint at ``path`` (with the task and recipe stored beside it in
    ``path.with_suffix(".json")``) or train one with this recipe and save it.

    Returns:
        ``(model, info, task)``: the task is the one the checkpoint was trained on.
    """
    import json

    meta_path = path.with_suffix(".json")
    model = retrieval_model(seed)
    if path.exists() and meta_path.exists():
        info = json.loads(meta_path.read_text())
        task = RetrievalTask(**info["task"])
        model = retrieval_model(info.get("seed", seed))
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict({k: v.float() for k, v in state.items()})
        info["loaded"] = str(path.name)
    else:
        model, res = train_retrieval_model(
            task, steps=steps, seed=seed, n_queries=n_queries, progress=progress
        )
        info = {
            "steps": steps,
            "seed": seed,
            "n_queries": n_queries,
            "batch_size": 16,
            "lr": 3e-3,
            "seconds": res.seconds,
            "final_loss": sum(res.losses[-50:]) / len(res.losses[-50:]),
            "task": dataclasses.asdict(task),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.half() for k, v in model.state_dict().items()}, path)
        model.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
        meta_path.write_text(json.dumps(info, indent=2))
        info["loaded"] = None
    model.eval()
    return model, info, task


@torch.no_grad()
def retrieval_accuracy(
    model,
    contexts: torch.Tensor,
    queries: torch.Tensor,
    answers: torch.Tensor,
    press=None,
    question_aware: bool = True,
) -> float:
    """Answer accuracy with the answer decoded from the (compressed) cache.

    Args:
        model: the retrieval model.
        contexts: ``[B, L]``; queries, answers: ``[B]``.
        press: an :class:`andpro.Press`, or None for the full cache.
        question_aware: prefill ``context SEP q`` (else ``context`` only, then ``SEP q :``).
    """
    from transformers import DynamicCache

    from andpro.press import Press

    sep = torch.full_like(queries, SEP)[:, None]
    colon = torch.full_like(queries, COLON)[:, None]
    if question_aware:
        prompt, rest = torch.cat([contexts, sep, queries[:, None]], 1), colon
    else:
        prompt, rest = contexts, torch.cat([sep, queries[:, None], colon], 1)
    if press is None:
        cache = DynamicCache(config=model.config)
        model(prompt, cache=cache)
        logits = model(rest, cache=cache).logits[:, -1]
    else:
        if not isinstance(press, Press):
            raise TypeError(f"press: expected an andpro.Press or None, got {type(press).__name__}")
        with press(model) as cache:
            model(prompt, cache=cache)
            logits = model(rest, cache=cache).logits[:, -1]
    return float((logits.argmax(-1) == answers).float().mean())


def continue_training(
    model,
    task: RetrievalTask,
    steps: int,
    lr: float = 1e-3,
    batch_size: int = 16,
    n_queries: int = 8,
    seed: int = 1,
    progress: bool = True,
):
    """Continue training a retrieval model at a constant learning rate (no warm-up, no decay)."""
    from neurips25_core.models import train

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, betas=(0.9, 0.95))
    res = train(
        model,
        lambda step: task.training_batch(batch_size, n_queries, gen),
        steps,
        optimizer=opt,
        seed=seed,
        progress=progress,
        desc="continue retrieval model",
        schedule=False,
    )
    model.eval()
    return model, res
