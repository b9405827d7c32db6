"""Speculative decoding with a fuzzy draft and bonus calibration, and the vanilla baseline.

The base model is any transformers causal LM, run with its own ``DynamicCache`` (cropped to the
committed length after each verification); the draft is a :class:`~easyspec.draft.FuzzyDraft`
(or a causal LM, wrapped with ``group_size``).
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

from .draft import FuzzyDraft
from .sampling import _check_sampling, sampling_probs, verify_chain

__all__ = ["SpecStats", "autoregressive_generate", "speculative_generate"]


@dataclasses.dataclass
class SpecStats:
    """What one speculative run did.

    ``accepted``: accepted draft tokens per iteration (k); ``mean_accepted_length`` = mean(k + 1),
    the tokens committed per base forward; ``acceptance_rate`` = sum(k) / (iterations·γ);
    ``draft_stages``: sequential layer stages the draft ran (a fuzzy group counts once — the
    latency unit when a group's attentions run on different devices).
    """

    gamma: int
    accepted: list[int] = dataclasses.field(default_factory=list)
    new_tokens: int = 0
    base_forwards: int = 0
    draft_forwards: int = 0
    draft_stages: int = 0
    draft_tokens: int = 0
    calibration_tokens: int = 0
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
) -> tuple[torch.Tensor, SpecStats]:
    """Lossless speculative decoding (chains): ``(ids (1, T + max_new_tokens), stats)``.

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

    At ``temperature=0`` the output equals the base model's greedy decoding token for token.
    """
    from transformers import DynamicCache

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
    ids = _check_ids(ids, vocab)
    device = next(base.parameters()).device
    ids = ids.to(device)
    if ids.shape[1] + max_new_tokens + gamma + 1 > draft.capacity:
        raise ValueError(
            f"max_new_tokens: prompt {ids.shape[1]} + {max_new_tokens} + gamma exceeds the draft "
            f"cache ({draft.capacity})"
        )

    def probs(logits):
        return sampling_probs(logits, temperature, top_k, top_p)

    stats = SpecStats(gamma=gamma)
    t0 = time.perf_counter()
    d0 = dict(draft.stats)
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
    stats.new_tokens = max_new_tokens
    stats.draft_forwards = draft.stats["forwards"] - d0["forwards"]
    stats.draft_stages = draft.stats["stages"] - d0["stages"]
    stats.draft_tokens = draft.stats["tokens"] - d0["tokens"]
    stats.seconds = time.perf_counter() - t0
    out_ids = torch.tensor([seq[: prompt_len + max_new_tokens]], device=device)
    return out_ids, stats


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
