"""Metric B: multi-query associative recall (MQAR) with two-token values, and a tiny Llama trained on it.

A context is ``L`` tokens of noise holding ``n_items`` items at random places. Item ``(k, v, w)``
(a key and a two-part value, each one of 16) is two context tokens: ``A(k, v)`` then ``B(v, w)``.
After ``SEP`` come queries ``q v w``: an asked key, then its two value tokens. The loss is on the
value tokens of the queries only: the model must find, at ``q``, the ``A`` token holding key
``q`` (answer ``v``) and, at ``v``, the ``B`` token holding ``v`` (answer ``w``). Keys and first
values are distinct within a context. Vocabulary (624): 0 pad, 1 ``SEP``, 2-63 noise, 64-79 ``q``,
80-95 ``v``, 96-111 ``w``, 112-367 ``A`` tokens, 368-623 ``B`` tokens.

Why fused item tokens: the classic layout (``k v`` as separate tokens) needs an induction circuit
(a previous-token head feeding a matching head); a 2-layer Llama trained here stayed at chance for
1,500 steps on it (and the earlier noise-plus-pairs task plateaued at 0.18 accuracy after 10,500
steps). With fused tokens each answer is one content match, which the model learns in minutes.
Eviction still has to keep the one ``B`` token of the asked item among ``L`` tokens.

The value is two tokens so that the answer is always read from the compressed cache:

- question-aware (the official ``pred.py``): prefill ``context SEP q`` under the press (the query
  key is in the observation window), then feed the gold ``v`` and read ``w`` from its logits; ``v``
  itself comes from the prefill logits, which see the full context, so it is not scored;
- question-agnostic (kvpress): prefill ``context`` under the press, then feed ``SEP q v`` and read
  ``v`` (at ``q``) and ``w`` (at ``v``); both must be right.

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
N_KEYS = 16  # distinct keys, first value tokens and second value tokens
QUERY = (64, 80)  # q: a key, as asked
ANSWER_V = (80, 96)  # the first value token, as answered
ANSWER_W = (96, 112)  # the second value token, as answered
ITEM_A = 112  # context token (key k, value v) = ITEM_A + 16 k + v
ITEM_B = ITEM_A + N_KEYS * N_KEYS  # context token (value v, value w) = ITEM_B + 16 v + w
VOCAB = ITEM_B + N_KEYS * N_KEYS  # 624


@dataclasses.dataclass(frozen=True)
class RetrievalTask:
    """Generator of MQAR prompts (see the module docstring).

    Attributes:
        context: context length ``L`` (noise + items).
        n_items: items in the context (two tokens each; distinct keys and first values), at most 16.
        guard: the first 4 and the last ``guard`` context tokens hold no item (the answer is never
            in the always-kept sinks or window).
    """

    context: int = 512
    n_items: int = 16
    guard: int = 16

    def __post_init__(self) -> None:
        if self.n_items < 1 or self.n_items > N_KEYS:
            raise ValueError(f"n_items: expected 1..{N_KEYS}, got {self.n_items}")
        if (self.context - self.guard - 4) // 2 < self.n_items:
            raise ValueError(
                f"n_items: {self.n_items} items of 2 tokens do not fit in a context of "
                f"{self.context} with guard {self.guard}"
            )

    def contexts(
        self, batch: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[B, L]`` contexts, ``[B, n]`` keys and ``[B, n, 2]`` values, all as indices 0..15."""
        n = self.n_items
        ids = torch.randint(*NOISE, (batch, self.context), generator=generator)
        keys = torch.stack([torch.randperm(N_KEYS, generator=generator)[:n] for _ in range(batch)])
        first = torch.stack([torch.randperm(N_KEYS, generator=generator)[:n] for _ in range(batch)])
        second = torch.randint(0, N_KEYS, (batch, n), generator=generator)
        slots = (self.context - self.guard - 4) // 2
        for b in range(batch):
            where = 4 + 2 * torch.randperm(slots, generator=generator)[:n]
            ids[b, where] = ITEM_A + N_KEYS * keys[b] + first[b]
            ids[b, where + 1] = ITEM_B + N_KEYS * first[b] + second[b]
        return ids, keys, torch.stack([first, second], -1)

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
        q = keys.gather(1, pick) + QUERY[0]
        v = vals.gather(1, pick[..., None].expand(-1, -1, 2)) + torch.tensor(
            [ANSWER_V[0], ANSWER_W[0]]
        )
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
        """``[B, L]`` contexts, ``[B]`` query tokens and ``[B, 2]`` answer tokens (one query each)."""
        ctx, keys, vals = self.contexts(batch, generator)
        pick = torch.randint(0, self.n_items, (batch,), generator=generator)
        rows = torch.arange(batch)
        answers = vals[rows, pick] + torch.tensor([ANSWER_V[0], ANSWER_W[0]])
        return ctx, keys[rows, pick] + QUERY[0], answers


def retrieval_model(seed: int = 0, max_position_embeddings: int = 1024):
    """A fresh 2-layer Llama (d=64, 4 query / 2 KV heads of dim 16, vocab 624, SDPA)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
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


#: The quality-B training recipe per benchmark mode: stages of (task, core ``train`` arguments).
#: Stage 1 learns the task on short contexts (cheap), stage 2 adapts it to the evaluation length.
#: ``smoke`` is a toy that does not learn (seconds).
RECIPES = {
    "smoke": [
        (dict(context=64, n_items=4, guard=8), dict(steps=10, batch_size=4, lr=3e-3)),
    ],
    "quick": [
        (dict(context=128, n_items=8, guard=16), dict(steps=4000, batch_size=16, lr=3e-3)),
        (dict(context=512, n_items=8, guard=16), dict(steps=600, batch_size=8, lr=1e-3)),
    ],
}
RECIPES["full"] = RECIPES["quick"]


def trained_retrieval_model(
    stages: list[tuple[dict, dict]],
    seed: int = 0,
    eval_n: int = 256,
    progress: bool = True,
    root=None,
):
    """Train :func:`retrieval_model` through ``stages`` (value-token loss, core ``train``), cached.

    Cached through :func:`neurips25_core.models.cached_checkpoint`; the key holds every stage's
    task and :func:`~neurips25_core.models.train_arguments` (defaults included), the model config
    and the seed. Each stage uses as many queries per sequence as the task has items.

    Args:
        stages: ``[(RetrievalTask kwargs, train kwargs), ...]`` (:data:`RECIPES`).
        seed: model init, batch order and data seed.
        eval_n: held-out contexts of the last stage's task for the recorded full-cache accuracy.
        progress: show bars while training.
        root: cache folder (default the core's).

    Returns:
        ``(model, task, meta)``: the model in eval mode, the last stage's task, and ``meta`` with
        ``seconds``, ``final_loss``, ``full_cache_accuracy`` (``aware``, ``agnostic``) and ``cached``.
    """
    from neurips25_core.models import cached_checkpoint, train, train_arguments

    tasks = [RetrievalTask(**t) for t, _ in stages]
    longest = max(t.context for t in tasks)
    model = retrieval_model(seed, max_position_embeddings=max(1024, longest + 64))
    args = []
    for _t, kw in stages:
        a = dict(weight_decay=0.0, seed=seed)
        a.update(kw)
        a.setdefault("warmup", max(1, a["steps"] // 20))
        args.append(a)

    def build():
        gen = torch.Generator().manual_seed(seed)
        seconds, losses = 0.0, []
        for i, (task, a) in enumerate(zip(tasks, args)):
            bs = a["batch_size"]
            res = train(
                model,
                lambda step, task=task, bs=bs: task.training_batch(bs, task.n_items, gen),
                progress=progress,
                desc=f"andpro: train MQAR model, stage {i + 1}/{len(tasks)}",
                **a,
            )
            seconds += res.seconds
            losses = res.losses
        tail = losses[-50:]
        g = torch.Generator().manual_seed(10_000 + seed)
        c, q, ans = tasks[-1].eval_batch(eval_n, g)
        acc = {
            tag: retrieval_accuracy(model, c, q, ans, None, question_aware=aware)
            for tag, aware in (("aware", True), ("agnostic", False))
        }
        meta = {
            "seconds": seconds,
            "final_loss": sum(tail) / len(tail),
            "full_cache_accuracy": acc,
            "eval_n": eval_n,
        }
        return model.state_dict(), meta

    state, meta = cached_checkpoint(
        "andpro_mqar",
        {
            "stages": [
                {"task": dataclasses.asdict(t), "train": train_arguments(**a)}
                for t, a in zip(tasks, args)
            ],
            "config": model.config,
            "seed": seed,
            "version": 2,
        },
        build,
        root=root,
    )
    if meta["cached"]:
        model.load_state_dict(state)
    model.eval()
    return model, tasks[-1], meta


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
