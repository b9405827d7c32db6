"""The reduced reproduction behind ``neurips25 bench xecomla``: data, teacher, students, peers.

* Data: the stdlib byte corpus (:func:`neurips25_core.data.stdlib_corpus`, split by file) with a
  fraction of the rows replaced by key→value recall probes ``ka=q;kd=x;…;kd?x;ka?q;…``
  (:func:`recall_rows`): the value after ``?`` can only be predicted by recalling the table.
* Teacher: a byte-level ``LlamaForCausalLM`` trained here (cached through
  :func:`neurips25_core.models.cached_checkpoint`).
* Students: built by :func:`xecomla.compose` from the teacher. ILD is teacher-forced, so every
  layer's loss is independent of the other layers: one ILD run of an all-MLA and one of an
  all-Mamba2 student give every layer's ILD-trained mixer, and a student is assembled from them
  (:func:`assemble`), exactly as the official pipeline composes its hybrid from the two ILD runs.
* Peers: the teacher itself with transformers' ``QuantizedCache`` (``backend="quanto"``, int4 /
  int2 with a full-precision residual window of 128 tokens, the KIVI recipe; needs
  ``optimum-quanto``) or ``backend="fp8"`` (per-tensor fp8, needs nothing). A quantized cache only
  changes what later tokens read, so peers are evaluated by prefilling part of each row and
  decoding the rest token by token (:func:`cached_logits`).
"""

from __future__ import annotations

import copy
import math
import random

import torch
import torch.nn.functional as F

__all__ = [
    "assemble",
    "cached_logits",
    "distill_batches",
    "evaluate",
    "mixed_batch",
    "peer_available",
    "peer_cache",
    "quantized_cache_bytes",
    "recall_eval",
    "recall_rows",
    "trained_teacher",
]

_LETTERS = b"abcdefghijklmnopqrstuvwxyz"
PAIR_BYTES = 5  # "ka=q;"
PAIRS = 8
TABLE_BYTES = PAIRS * PAIR_BYTES  # the key→value table that opens every probe row


def recall_rows(n: int, length: int, gen: torch.Generator, pairs: int = PAIRS):
    """Key→value recall rows as bytes: ``ka=q;kd=x;…`` (``pairs`` entries), then queries ``kd?x;``.

    Returns:
        ``(window [n, length + 1] int64, answer [n, length + 1] bool)``; ``answer`` marks the value
        byte after each ``?``.

    Example:
        >>> import torch
        >>> w, m = recall_rows(1, 49, torch.Generator().manual_seed(0), pairs=2)
        >>> bytes(w[0].tolist())[:10].count(b"="), int(m.sum())
        (2, 8)
    """
    if pairs < 1 or pairs > 26:
        raise ValueError(f"pairs: expected 1..26, got {pairs}")
    if length + 1 < pairs * PAIR_BYTES + PAIR_BYTES:
        raise ValueError(f"length: {length} leaves no room for a query after {pairs} pairs")
    rng = random.Random(int(torch.randint(0, 2**31, (1,), generator=gen)))
    rows, marks = [], []
    for _ in range(n):
        keys = rng.sample(range(26), pairs)
        table = {k: rng.randrange(26) for k in keys}
        seq = bytearray()
        for k in keys:
            seq += bytes([ord("k"), _LETTERS[k], ord("="), _LETTERS[table[k]], ord(";")])
        mark = [False] * len(seq)
        while len(seq) < length + 1:
            k = rng.choice(keys)
            seq += bytes([ord("k"), _LETTERS[k], ord("?"), _LETTERS[table[k]], ord(";")])
            mark += [False, False, False, True, False]
        rows.append(list(seq[: length + 1]))
        marks.append(mark[: length + 1])
    return torch.tensor(rows, dtype=torch.long), torch.tensor(marks)


def mixed_batch(corpus, split, batch_size, seq_len, gen, recall_fraction=0.1):
    """Stdlib windows ``(x, y)`` with ``round(recall_fraction·batch_size)`` rows replaced by probes."""
    x, y = corpus.get_batch(split, batch_size, seq_len, generator=gen)
    n = round(recall_fraction * batch_size)
    if n:
        w, _ = recall_rows(n, seq_len, gen)
        x[:n], y[:n] = w[:, :-1], w[:, 1:]
    return x, y


def recall_eval(n: int, seq_len: int, seed: int = 1234):
    """A fixed recall set: ``(input_ids [n, T], labels [n, T])`` with −100 except at the answers."""
    w, mark = recall_rows(n, seq_len, torch.Generator().manual_seed(seed))
    labels = torch.where(mark[:, 1:], w[:, 1:], torch.full_like(w[:, 1:], -100))
    return w[:, :-1], labels


def distill_batches(corpus, steps, batch_size, seq_len, seed, recall_fraction=0.1):
    """``steps`` training batches of token ids (the distillation data), seeded."""
    gen = torch.Generator().manual_seed(seed)
    return [
        mixed_batch(corpus, "train", batch_size, seq_len, gen, recall_fraction)[0]
        for _ in range(steps)
    ]


def teacher_config(hidden, layers, heads=4, kv_heads=2, ffn=None, max_positions=8192):
    """The byte-level Llama teacher's config (sdpa attention)."""
    from neurips25_core.models import tiny_llama_config

    cfg = tiny_llama_config(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        intermediate_size=ffn if ffn is not None else 3 * hidden,
        max_position_embeddings=max_positions,
    )
    cfg._attn_implementation = "sdpa"
    return cfg


def trained_teacher(size: dict, progress: bool = True):
    """The teacher of ``size`` (hidden, layers, steps, batch, seq), trained on stdlib + 10 % probes.

    Cached by :func:`neurips25_core.models.cached_checkpoint` (config, corpus fingerprint, every
    training argument). Returns ``(model in eval mode, corpus, meta)``.
    """
    from transformers import LlamaForCausalLM

    from neurips25_core.data import stdlib_corpus
    from neurips25_core.models import cached_checkpoint, train, train_arguments

    corpus = stdlib_corpus()
    cfg = teacher_config(size["hidden"], size["layers"])
    B, T, steps = size["batch"], size["seq"], size["teacher_steps"]
    targs = dict(steps=steps, lr=3e-3, batch_size=B, seq_len=T, seed=0)

    def build():
        gen = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)
        res = train(
            model,
            lambda step: mixed_batch(corpus, "train", B, T, gen),
            progress=progress,
            desc="xecomla teacher",
            **targs,
        )
        tail = res.losses[-20:]
        return model.state_dict(), {
            "final_train_loss": sum(tail) / len(tail),
            "seconds": res.seconds,
        }

    state, meta = cached_checkpoint(
        "xecomla-teacher",
        {
            "config": cfg,
            "data": f"stdlib+recall0.1 {corpus.fingerprint}",
            "train": train_arguments(**targs),
            "version": 1,
        },
        build,
    )
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(state)
    model.config.use_cache = False
    return model.eval(), corpus, meta


def assemble(teacher, kinds, mla_source, mamba_source):
    """A student whose layer i is ``kinds[i]`` ∈ {"mla", "mamba2", "gqa"}, mixers copied from the
    ILD-trained all-MLA (``mla_source``) and all-Mamba2 (``mamba_source``) students."""
    from .compose import compose

    mla = [i for i, k in enumerate(kinds) if k == "mla"]
    gqa = [i for i, k in enumerate(kinds) if k == "gqa"]
    mla_cfg = mla_source.model.layers[0].self_attn.mla_config if mla else None
    student = compose(teacher, mla_layers=mla, mla_config=mla_cfg, gqa_layers=gqa)
    for i, kind in enumerate(kinds):
        if kind == "mla":
            student.model.layers[i].self_attn = copy.deepcopy(mla_source.model.layers[i].self_attn)
        elif kind == "mamba2":
            student.model.layers[i].self_attn = copy.deepcopy(
                mamba_source.model.layers[i].self_attn
            )
    return student


def _scores(logits, y):
    """(sum of next-byte cross-entropy in nats, count) and recall (correct, count) at labels ≠ −100."""
    flat, target = logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1)
    keep = target != -100
    nll = F.cross_entropy(flat[keep], target[keep], reduction="sum")
    correct = (flat[keep].argmax(-1) == target[keep]).sum()
    return float(nll), float(correct), int(keep.sum())


@torch.no_grad()
def evaluate(model, val, recall, logits_fn=None, recall_logits_fn=None):
    """Validation bits/byte over ``val`` = [(x, y), ...] and recall accuracy over ``recall`` = (x, labels).

    ``logits_fn(model, x) -> logits`` defaults to a full forward (no cache); ``recall_logits_fn``
    (default ``logits_fn``) is used on the recall rows.
    """
    logits_fn = logits_fn or (lambda m, x: m(input_ids=x).logits)
    recall_logits_fn = recall_logits_fn or logits_fn
    nll, count = 0.0, 0
    for x, y in val:
        n, _, c = _scores(logits_fn(model, x), y)
        nll, count = nll + n, count + c
    rx, ry = recall
    _, correct, total = _scores(recall_logits_fn(model, rx), ry)
    return nll / count / math.log(2), correct / total


def peer_available(kind: str) -> str | None:
    """None when the peer cache ``kind`` ("quanto4", "quanto2", "fp8") can run, else why not."""
    if kind == "fp8":
        return None
    try:
        import optimum.quanto  # noqa: F401
    except ImportError:
        return (
            "optimum-quanto is not installed: transformers' QuantizedCache(backend='quanto') needs it "
            "(install the peers extra: uv sync --all-packages --extra peers)"
        )
    return None


def peer_cache(kind: str, config):
    """A transformers ``QuantizedCache`` for ``kind``: "quanto4" / "quanto2" (int4 / int2,
    transformers' defaults: group 64, residual window 128) or "fp8" (per-tensor)."""
    from transformers import QuantizedCache

    if kind == "fp8":
        return QuantizedCache(backend="fp8", config=config)
    if kind in ("quanto4", "quanto2"):
        return QuantizedCache(backend="quanto", config=config, nbits=int(kind[-1]))
    raise ValueError(f"kind: expected 'quanto4', 'quanto2' or 'fp8', got {kind!r}")


def cached_logits(cache_factory, prefill: int):
    """``logits_fn`` that prefills ``prefill`` tokens into ``cache_factory(model)``, then decodes
    the rest of the row one token at a time (so later tokens read the quantized cache)."""

    def run(model, x):
        cache = cache_factory(model)
        T = x.shape[1]
        p = min(prefill, T)
        out = [model(input_ids=x[:, :p], cache=cache, use_cache=True).logits]
        for t in range(p, T):
            out.append(model(input_ids=x[:, t : t + 1], cache=cache, use_cache=True).logits)
        return torch.cat(out, dim=1)

    return run


def quantized_cache_bytes(cache, value_bytes: int = 2) -> tuple[int, int]:
    """Bytes held by a ``QuantizedCache`` after use: ``(quantized part, full-precision part)``.

    The quantized part counts the packed integer (or fp8) data as stored and its scales and
    zero-points at ``value_bytes`` each (the model dtype; bf16 = 2); the full-precision part is
    quanto's residual window (keys and values not yet quantized) at ``value_bytes`` per number.
    """
    quantized, residual = 0, 0
    for layer in cache.layers:
        for q in (layer._quantized_keys, layer._quantized_values):
            if q is None:
                continue
            if isinstance(q, tuple):  # fp8: (data, per-tensor scale)
                quantized += q[0].numel() * q[0].element_size() + q[1].numel() * value_bytes
                continue
            data = q._data
            packed = getattr(data, "_data", data)  # quanto's PackedTensor keeps the uint8 bytes
            quantized += packed.numel() * packed.element_size()
            quantized += (q._scale.numel() + q._shift.numel()) * value_bytes
        for r in (layer.keys, layer.values):
            if isinstance(r, torch.Tensor) and r.dim() == 4:
                residual += r.numel() * value_bytes
    return quantized, residual
