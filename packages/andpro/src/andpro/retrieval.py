"""Metric B: multi-query associative recall (MQAR) with two-token values, and a tiny Llama trained on it.

A context is ``L`` tokens of noise holding ``n_items`` items ``k v w`` (a key, then a two-token
value) at random places. After ``SEP`` come queries ``q v w``: a key of the context followed by
its value. The model is trained with the loss on the value tokens of the queries only, so it must
retrieve ``v`` at ``q`` and ``w`` at ``v`` (induction heads: ``v`` and ``w`` are distinct tokens in a
context). Vocabulary (256): 0 pad, 1 ``SEP``, 2-63 noise, 64-127 keys, 128-255 value tokens.

The value is two tokens so that the answer is always read from the compressed cache:

- question-aware (the official ``pred.py``): prefill ``context SEP q`` under the press (the query
  key is in the observation window), then feed the gold ``v`` and read ``w`` from its logits; ``v``
  itself comes from the prefill logits, which see the full context, so it is not scored;
- question-agnostic (kvpress): prefill ``context`` under the press, then feed ``SEP q v`` and read
  ``v`` (at ``q``) and ``w`` (at ``v``); both are scored as one answer.

Example:
    >>> task = RetrievalTask(context=64, n_items=4, guard=8)
    >>> ctx, keys, vals = task.contexts(2, torch.Generator().manual_seed(0))
    >>> ctx.shape, keys.shape, vals.shape
    (torch.Size([2, 64]), torch.Size([2, 4]), torch.Size([2, 4, 2]))
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = [
    "RetrievalTask",
    "compressed_cache",
    "retrieval_accuracy",
    "retrieval_correct",
    "retrieval_correct_many",
    "retrieval_model",
    "trained_retrieval_model",
]

PAD, SEP = 0, 1
NOISE = (2, 64)
KEYS = (64, 128)
VALUES = (128, 256)
VOCAB = 256


@dataclasses.dataclass(frozen=True)
class RetrievalTask:
    """Generator of MQAR prompts (see the module docstring).

    Attributes:
        context: context length ``L`` (noise + items).
        n_items: ``k v w`` items in the context (distinct keys; all ``2 n_items`` value tokens
            distinct), at most 64.
        guard: the first 4 and the last ``guard`` context tokens hold no item (the answer is never
            in the always-kept sinks or window).
    """

    context: int = 512
    n_items: int = 16
    guard: int = 16

    def __post_init__(self) -> None:
        if self.n_items < 1 or self.n_items > KEYS[1] - KEYS[0]:
            raise ValueError(f"n_items: expected 1..{KEYS[1] - KEYS[0]}, got {self.n_items}")
        if (self.context - self.guard - 4) // 3 < self.n_items:
            raise ValueError(
                f"n_items: {self.n_items} items of 3 tokens do not fit in a context of "
                f"{self.context} with guard {self.guard}"
            )

    def contexts(
        self, batch: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, L]`` contexts, ``[B, n]`` keys and ``[B, n, 2]`` values (int64)."""
        n = self.n_items
        ids = torch.randint(*NOISE, (batch, self.context), generator=generator)
        keys = torch.stack(
            [torch.randperm(KEYS[1] - KEYS[0], generator=generator)[:n] for _ in range(batch)]
        )
        vals = torch.stack(
            [
                torch.randperm(VALUES[1] - VALUES[0], generator=generator)[: 2 * n]
                for _ in range(batch)
            ]
        ).view(batch, n, 2)
        keys, vals = keys + KEYS[0], vals + VALUES[0]
        slots = (self.context - self.guard - 4) // 3
        for b in range(batch):
            where = 4 + 3 * torch.randperm(slots, generator=generator)[:n]
            ids[b, where] = keys[b]
            ids[b, where + 1] = vals[b, :, 0]
            ids[b, where + 2] = vals[b, :, 1]
        return ids, keys, vals

    def training_batch(
        self, batch: int, n_queries: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)``: ``context SEP (q v w) * n_queries`` shifted by one; loss on ``v`` and ``w`` only."""
        if not 1 <= n_queries <= self.n_items:
            raise ValueError(f"n_queries: expected 1..{self.n_items}, got {n_queries}")
        ctx, keys, vals = self.contexts(batch, generator)
        pick = torch.stack(
            [torch.randperm(self.n_items, generator=generator)[:n_queries] for _ in range(batch)]
        )
        q = keys.gather(1, pick)
        v = vals.gather(1, pick[..., None].expand(-1, -1, 2))
        tail = torch.cat([q[..., None], v], -1).reshape(batch, -1)
        seq = torch.cat([ctx, torch.full((batch, 1), SEP), tail], 1)
        x, y = seq[:, :-1], seq[:, 1:].clone()
        # seq index of q_i is L + 1 + 3i; v_i, w_i follow; y[t] = seq[t + 1]
        start = self.context + 1 + 3 * torch.arange(n_queries)
        mask = torch.zeros(y.shape[1], dtype=torch.bool)
        mask[start] = True  # predicts v_i
        mask[start + 1] = True  # predicts w_i
        y[:, ~mask] = -100
        return x, y

    def eval_batch(
        self, batch: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, L]`` contexts, ``[B]`` query keys and ``[B, 2]`` their values (one query per context)."""
        ctx, keys, vals = self.contexts(batch, generator)
        pick = torch.randint(0, self.n_items, (batch,), generator=generator)
        rows = torch.arange(batch)
        return ctx, keys[rows, pick], vals[rows, pick]


def retrieval_model(seed: int = 0, max_position_embeddings: int = 1024):
    """A fresh 2-layer Llama (d=128, 4 query / 2 KV heads, vocab 256, SDPA)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
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


#: The recipe of the quality-B model per benchmark mode (``smoke`` is a toy that does not learn).
RECIPES = {
    "smoke": dict(task=dict(context=64, n_items=4, guard=8), steps=20, batch_size=4, n_queries=4),
    "quick": dict(
        task=dict(context=512, n_items=16, guard=16), steps=1500, batch_size=8, n_queries=16
    ),
}
RECIPES["full"] = RECIPES["quick"]


def trained_retrieval_model(
    task: RetrievalTask,
    steps: int,
    batch_size: int = 8,
    n_queries: int = 16,
    lr: float = 2e-3,
    seed: int = 0,
    eval_n: int = 256,
    progress: bool = True,
):
    """Train :func:`retrieval_model` on ``task`` (value-token loss, core ``train``), cached.

    Cached through :func:`neurips25_core.models.cached_checkpoint`; the key holds the task, the
    model config, every :func:`~neurips25_core.models.train` argument and the data seed.

    Returns:
        ``(model, meta)``: the model in eval mode; ``meta`` has ``seconds``, ``final_loss``,
        ``full_cache_accuracy`` (question-agnostic, ``eval_n`` fresh contexts) and ``cached``.
    """
    from neurips25_core.models import cached_checkpoint, train, train_arguments

    model = retrieval_model(seed, max_position_embeddings=max(1024, task.context + 64))
    args = dict(
        steps=steps,
        lr=lr,
        seed=seed,
        warmup=max(1, steps // 20),
        weight_decay=0.0,
        batch_size=batch_size,
    )

    def build():
        gen = torch.Generator().manual_seed(seed)
        res = train(
            model,
            lambda step: task.training_batch(batch_size, n_queries, gen),
            progress=progress,
            desc="andpro: train MQAR model",
            **args,
        )
        tail = res.losses[-50:]
        g = torch.Generator().manual_seed(10_000 + seed)
        c, q, a = task.eval_batch(eval_n, g)
        acc = retrieval_accuracy(model, c, q, a, None, question_aware=False)
        meta = {
            "seconds": res.seconds,
            "final_loss": sum(tail) / len(tail),
            "full_cache_accuracy": acc,
            "eval_n": eval_n,
        }
        return model.state_dict(), meta

    state, meta = cached_checkpoint(
        "andpro_mqar",
        {
            "task": dataclasses.asdict(task),
            "config": model.config,
            "n_queries": n_queries,
            "data_seed": seed,
            "train": train_arguments(**args),
            "version": 1,
        },
        build,
    )
    if meta["cached"]:
        model.load_state_dict(state)
    model.eval()
    return model, meta


@torch.no_grad()
def retrieval_correct(
    model,
    contexts: torch.Tensor,
    queries: torch.Tensor,
    answers: torch.Tensor,
    press=None,
    question_aware: bool = True,
) -> torch.Tensor:
    """Per-prompt correctness (``[B]`` bool) with the answer decoded from the (compressed) cache.

    Args:
        model: the retrieval model.
        contexts: ``[B, L]``; queries: ``[B]`` keys; answers: ``[B, 2]`` value tokens.
        press: an :class:`andpro.Press`, or None for the full cache.
        question_aware: prefill ``context SEP q`` (else ``context`` only, then ``SEP q v``).
    """
    from transformers import DynamicCache

    from andpro.press import Press

    if press is not None and not isinstance(press, Press):
        raise TypeError(f"press: expected an andpro.Press or None, got {type(press).__name__}")
    prompt, rest = _prompt_and_rest(contexts, queries, answers, question_aware)

    def run(cache):
        model(prompt, cache=cache)
        return model(rest, cache=cache).logits.argmax(-1)

    if press is None:
        pred = run(DynamicCache(config=model.config))
    else:
        with press(model) as cache:
            pred = run(cache)
    return _score(pred, answers, question_aware)


def retrieval_accuracy(model, contexts, queries, answers, press=None, question_aware=True) -> float:
    """Mean of :func:`retrieval_correct`."""
    return float(
        retrieval_correct(model, contexts, queries, answers, press, question_aware).float().mean()
    )


def _prompt_and_rest(contexts, queries, answers, question_aware):
    sep = torch.full_like(queries, SEP)[:, None]
    if question_aware:
        return torch.cat([contexts, sep, queries[:, None]], 1), answers[:, :1]
    return contexts, torch.cat([sep, queries[:, None], answers[:, :1]], 1)


def _score(pred, answers, question_aware):
    if question_aware:
        return pred[:, -1] == answers[:, 1]
    return (pred[:, -2:] == answers).all(-1)


def compressed_cache(model, layers, press=None):
    """A cache built from one full prefill's captured ``(q, k, v)`` per layer, compressed by ``press``.

    Prefill attention is full under a press, so every press sees the same prefill keys, values and
    window queries: building the compressed cache from one captured prefill gives exactly the cache
    the press builds itself (tested against ``with press(model)``), without a prefill per press.

    Args:
        model: the causal LM the layers were captured from.
        layers: per layer ``(q [B, H_q, L, d], k [B, H_kv, L, d], v)`` post-RoPE
            (:func:`andpro.bench.capture_qkv`).
        press: an :class:`andpro.Press`, or None for the full cache (a ``DynamicCache``).

    Returns:
        A ``PressCache`` (use it inside ``with press(model):`` with ``cache.active = True``) or,
        for ``press=None``, a ``DynamicCache``.
    """
    from transformers import DynamicCache

    from andpro.cache import PressCache

    if press is None:
        cache = DynamicCache(config=model.config)
        for li, (_q, k, v) in enumerate(layers):
            cache.update(k, v, li)
        return cache
    attn = [layer.self_attn for layer in model.model.layers]
    cache = PressCache(len(layers))
    for li, (q, k, v) in enumerate(layers):
        layer = cache.layers[li]
        layer.update(k, v)
        layer.prefill_pending = False
        w = min(press.window, q.shape[2])
        keep = press.keep_mask(q[:, :, -w:], k, v, attn[li].scaling, li)
        if not bool(keep.all()):
            layer.compress(keep)
    return cache


@torch.no_grad()
def retrieval_correct_many(
    model,
    contexts: torch.Tensor,
    queries: torch.Tensor,
    answers: torch.Tensor,
    presses: dict,
    question_aware: bool = True,
) -> dict[str, torch.Tensor]:
    """:func:`retrieval_correct` for several presses from one shared full prefill.

    Args:
        presses: name -> :class:`andpro.Press` or None (full cache).

    Returns:
        name -> ``[B]`` bool correctness.
    """
    from andpro.bench import capture_qkv

    prompt, rest = _prompt_and_rest(contexts, queries, answers, question_aware)
    layers = capture_qkv(model, prompt)
    out = {}
    for name, press in presses.items():
        cache = compressed_cache(model, layers, press)
        if press is None:
            logits = model(rest, cache=cache).logits
        else:
            with press(model):
                cache.active = True
                try:
                    logits = model(rest, cache=cache).logits
                finally:
                    cache.active = False
        out[name] = _score(logits.argmax(-1), answers, question_aware)
    return out
