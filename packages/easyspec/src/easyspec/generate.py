"""Speculative decoding with a fuzzy draft and bonus calibration, and the vanilla baseline.

The base model is any transformers causal LM, run with its own ``DynamicCache`` (cropped to the
committed length after each verification); the draft is a :class:`~easyspec.draft.FuzzyDraft`
(or a causal LM, wrapped with ``group_size``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import torch
from torch import nn

from .draft import FuzzyDraft
from .sampling import _check_sampling, sampling_probs, verify_chain
from .tree import check_branching, draft_tree, verify_tree_greedy

__all__ = ["SpecStats", "autoregressive_generate", "speculative_generate"]


@dataclasses.dataclass
class SpecStats:
    """What one speculative run did.

    ``accepted``: accepted draft tokens per iteration (k); ``mean_accepted_length`` = mean(k + 1),
    the tokens committed per base forward; ``acceptance_rate`` = sum(k) / (iterations·γ);
    ``draft_stages``: sequential layer stages the draft ran (a fuzzy group counts once — the
    latency unit when a group's attentions run on different devices); ``verified_tokens``: draft
    tokens the base scored (γ per iteration for a chain, the node count for a tree).
    """

    gamma: int
    accepted: list[int] = dataclasses.field(default_factory=list)
    new_tokens: int = 0
    base_forwards: int = 0
    draft_forwards: int = 0
    draft_stages: int = 0
    draft_tokens: int = 0
    calibration_tokens: int = 0
    verified_tokens: int = 0
    seconds: float = 0.0

    @property
    def iterations(self) -> int:
        return len(self.accepted)

    @property
    def mean_accepted_length(self) -> float:
        return sum(k + 1 for k in self.accepted) / max(1, len(self.accepted))

    @property
    def acceptance_rate(self) -> float:
        return sum(self.accepted) / max(1, len(self.accepted) * self.gamma)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(
            iterations=self.iterations,
            mean_accepted_length=self.mean_accepted_length,
            acceptance_rate=self.acceptance_rate,
        )
        return d


def _check_ids(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    if not torch.is_tensor(ids) or ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ids: expected an integer tensor, got {getattr(ids, 'dtype', type(ids))}")
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
        raise ValueError(f"ids: expected shape (1, T) with T >= 1, got {tuple(ids.shape)}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(f"ids: expected ids in [0, {vocab}), got range [{lo}, {hi}]")
    return ids


def _cache_kwarg(base: nn.Module) -> str:
    """transformers 5.2x renamed ``past_key_values`` to ``cache``; use whichever forward takes."""
    import inspect

    params = inspect.signature(base.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _crop(cache, length: int) -> None:
    """Keep the first ``length`` positions (a negative ``crop`` argument works in 4.x and 5.x)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


def _base_vocab(base: nn.Module) -> int:
    cfg = getattr(base, "config", None)
    if cfg is None or not hasattr(cfg, "vocab_size"):
        raise TypeError(f"base: expected a transformers causal LM, got {type(base).__name__}")
    return int(cfg.vocab_size)


@torch.no_grad()
def speculative_generate(
    base: nn.Module,
    draft: FuzzyDraft | nn.Module,
    ids: torch.Tensor,
    gamma: int = 4,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    calibrate: bool = True,
    max_new_tokens: int = 64,
    generator: torch.Generator | None = None,
    group_size: int = 4,
    tree: Sequence[int] | None = None,
) -> tuple[torch.Tensor, SpecStats]:
    """Lossless speculative decoding: ``(ids (1, T + max_new_tokens), stats)``.

    Args:
        base: the target causal LM (transformers; batch 1).
        draft: a :class:`FuzzyDraft`, or a causal LM wrapped as ``FuzzyDraft(draft, group_size)``.
        ids: the prompt, (1, T) or (T,).
        gamma: draft tokens per iteration.
        temperature, top_k, top_p: one sampling transform for both models; 0 = greedy.
        calibrate: after each verification, truncate the draft cache to the committed length and
            recompute the accepted tokens + the new token with one exact forward (EasySpec); False
            keeps the fuzzy K/V (the ablation).
        max_new_tokens: tokens to generate.
        generator: random source at ``temperature > 0``.
        group_size: N when ``draft`` is a model.
        tree: a static token tree's branching factors ``(b_1, ..., b_gamma)`` (greedy only, see
            :mod:`easyspec.tree`); ``None`` drafts a chain. The base then verifies through
            easyspec's exact executor (a Llama/Qwen2/Mistral model) with a tree attention mask.

    At ``temperature=0`` the output equals the base model's greedy decoding token for token.
    """
    if not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma: expected an int >= 1, got {gamma!r}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    _check_sampling(temperature, top_k, top_p)
    vocab = _base_vocab(base)
    if not isinstance(draft, FuzzyDraft):
        draft = FuzzyDraft(draft, group_size=group_size)
    if draft.vocab_size != vocab:
        raise ValueError(
            f"draft: vocabulary size {draft.vocab_size} does not match the base's {vocab}"
        )
    ids = _check_ids(ids, vocab).to(next(base.parameters()).device)
    if ids.shape[1] + max_new_tokens + gamma + 1 > draft.capacity:
        raise ValueError(
            f"max_new_tokens: prompt {ids.shape[1]} + {max_new_tokens} + gamma exceeds the draft "
            f"cache ({draft.capacity})"
        )

    if tree is not None:
        tree = check_branching(tree, gamma)
        if temperature != 0:
            raise ValueError(
                f"tree: token trees use greedy verification only (temperature=0), got "
                f"temperature={temperature!r}; use a chain (tree=None) to sample"
            )
    stats = SpecStats(gamma=gamma)
    t0 = time.perf_counter()
    d0 = dict(draft.stats)
    if tree is None:
        seq = _chain_loop(
            base, draft, ids, gamma, temperature, top_k, top_p, calibrate, max_new_tokens,
            generator, stats,
        )  # fmt: skip
    else:
        seq = _tree_loop(base, draft, ids, tree, calibrate, max_new_tokens, stats)
    stats.new_tokens = max_new_tokens
    stats.draft_forwards = draft.stats["forwards"] - d0["forwards"]
    stats.draft_stages = draft.stats["stages"] - d0["stages"]
    stats.draft_tokens = draft.stats["tokens"] - d0["tokens"]
    stats.seconds = time.perf_counter() - t0
    out_ids = torch.tensor([seq[: ids.shape[1] + max_new_tokens]], device=ids.device)
    return out_ids, stats


def _chain_loop(
    base, draft, ids, gamma, temperature, top_k, top_p, calibrate, max_new_tokens, generator, stats
) -> list[int]:
    from transformers import DynamicCache

    device = ids.device

    def probs(logits):
        return sampling_probs(logits, temperature, top_k, top_p)

    seq = ids[0].tolist()
    cache = DynamicCache()
    kw = _cache_kwarg(base)
    if len(seq) > 1:
        base(input_ids=ids[:, :-1], **{kw: cache}, use_cache=True)
        stats.base_forwards += 1
    q_next = probs(draft.prefill(ids)[-1])
    prompt_len = len(seq)
    while len(seq) - prompt_len < max_new_tokens:
        t = len(seq)
        xs, qs = [], []
        q = q_next
        for j in range(gamma):
            x = (
                int(torch.multinomial(q, 1, generator=generator))
                if temperature > 0
                else int(q.argmax())
            )
            xs.append(x)
            qs.append(q)
            if j < gamma - 1:
                q = probs(draft.step(x))
        inp = torch.tensor([[seq[-1], *xs]], device=device)
        out = base(input_ids=inp, **{kw: cache}, use_cache=True)
        stats.base_forwards += 1
        p = probs(out.logits[0])
        k, y = verify_chain(torch.tensor(xs), torch.stack(qs), p, generator)
        stats.accepted.append(k)
        stats.verified_tokens += gamma
        committed = [*xs[:k], y]
        seq.extend(committed)
        _crop(cache, len(seq) - 1)
        if calibrate:
            draft.truncate(t)
            logits = draft.calibrate(torch.tensor(committed))
            stats.calibration_tokens += len(committed)
        else:
            keep = t + min(k, gamma - 1)  # fuzzy entries of accepted tokens stay
            draft.truncate(keep)
            logits = draft.extend(torch.tensor(seq[keep:]))
        q_next = probs(logits[-1])
    return seq


def _tree_loop(base, draft, ids, branching, calibrate, max_new_tokens, stats) -> list[int]:
    """Greedy token-tree speculation; the base verifies through an exact executor whose cache
    can hold a tree and keep only the accepted path (:meth:`FuzzyDraft.select`)."""
    try:
        verifier = FuzzyDraft(base, group_size=1)
    except TypeError as exc:
        raise TypeError(f"base: token trees need a base the executor supports ({exc})") from None
    nodes = sum(math.prod(branching[: d + 1]) for d in range(len(branching)))
    need = ids.shape[1] + max_new_tokens + nodes + 1
    if need > min(draft.capacity, verifier.capacity):
        raise ValueError(
            f"max_new_tokens: prompt {ids.shape[1]} + {max_new_tokens} + {nodes} tree nodes "
            f"exceeds the cache ({min(draft.capacity, verifier.capacity)})"
        )
    seq = ids[0].tolist()
    prompt_len = len(seq)
    if len(seq) > 1:
        verifier.prefill(ids[:, :-1])
        stats.base_forwards += 1
    next_logits = draft.prefill(ids)[-1]
    while len(seq) - prompt_len < max_new_tokens:
        t = len(seq)
        tree = draft_tree(draft, next_logits, branching)
        n, start = len(tree), verifier.length  # start = t - 1
        mask = torch.zeros(1 + n, start + 1 + n, dtype=torch.bool)
        mask[:, : start + 1] = True  # the committed prefix and the last committed token
        mask[1:, start + 1 :] = tree.ancestors()
        positions = torch.tensor([t - 1, *(t - 1 + d for d in tree.depths)])
        logits = verifier.extend(
            torch.tensor([seq[-1], *tree.tokens]), exact=True, positions=positions, mask=mask
        )
        stats.base_forwards += 1
        path, y = verify_tree_greedy(tree, logits)
        stats.accepted.append(len(path))
        stats.verified_tokens += n
        committed = [*(tree.tokens[i] for i in path), y]
        verifier.select(start + 1, [start + 1 + i for i in path])
        seq.extend(committed)
        if calibrate:
            draft.truncate(t)
            logits = draft.calibrate(torch.tensor(committed))
            stats.calibration_tokens += len(committed)
        else:  # the accepted nodes' fuzzy K/V stay; the rest is appended fuzzily
            fed = [tree.slots[i] for i in path if tree.slots[i] >= 0]
            draft.select(t, fed)
            logits = draft.extend(torch.tensor(seq[t + len(fed) :]))
        next_logits = logits[-1]
    return seq


@torch.no_grad()
def autoregressive_generate(
    base: nn.Module,
    ids: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Vanilla decoding with the same sampling transform (the baseline): ids (1, T + n)."""
    from transformers import DynamicCache

    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    _check_sampling(temperature, top_k, top_p)
    ids = _check_ids(ids, _base_vocab(base)).to(next(base.parameters()).device)
    cache = DynamicCache()
    kw = _cache_kwarg(base)
    seq = ids[0].tolist()
    inp = ids
    for _ in range(max_new_tokens):
        logits = base(input_ids=inp, **{kw: cache}, use_cache=True).logits[0, -1]
        p = sampling_probs(logits, temperature, top_k, top_p)
        x = (
            int(torch.multinomial(p, 1, generator=generator))
            if temperature > 0
            else int(p.argmax())
        )
        seq.append(x)
        inp = torch.tensor([[x]], device=ids.device)
    return torch.tensor([seq], device=ids.device)
