"""Exact speculative sampling: the sampling transform and the chain verification rule.

The rule (Leviathan et al. 2023; Chen et al. 2023): accept draft token ``x_j`` iff
``r_j * q_j(x_j) <= p_j(x_j)`` with ``r_j ~ U(0, 1)``; at the first rejection emit
``y ~ (p_j - q_j)_+ / ||(p_j - q_j)_+||_1`` (``p_j`` when the residual is zero), else the bonus
``y ~ p_{γ+1}``. Greedy (``temperature == 0``): accept iff ``x_j == argmax p_j``.
Emitted tokens follow the base distribution whatever ``q`` is, which keeps fuzzy drafting lossless.
"""

from __future__ import annotations

import torch

__all__ = ["chain_law", "sampling_probs", "verify_chain"]


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature: expected a number >= 0, got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected None or an int >= 1, got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p: expected None or a number in (0, 1], got {top_p!r}")


def sampling_probs(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The sampling distribution S(logits) over the last axis, float32 (float64 stays float64).

    ``temperature == 0`` gives the one-hot of the argmax (greedy). ``-inf`` logits get probability
    zero; a row of all ``-inf`` is refused.

    >>> p = sampling_probs(torch.tensor([0.0, 1.0, float("-inf")]), temperature=1.0)
    >>> [round(v, 4) for v in p.tolist()]
    [0.2689, 0.7311, 0.0]
    >>> sampling_probs(torch.tensor([0.0, 2.0, 1.0]), temperature=0.0).tolist()
    [0.0, 1.0, 0.0]
    """
    _check_sampling(temperature, top_k, top_p)
    if not torch.is_tensor(logits) or not logits.is_floating_point():
        raise TypeError(f"logits: expected a floating-point tensor, got {type(logits).__name__}")
    x = logits.double() if logits.dtype == torch.float64 else logits.float()
    if torch.isneginf(x).all(dim=-1).any():
        raise ValueError("logits: a row is all -inf, no token can be sampled")
    if temperature == 0:
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(x.dtype)
    x = x / temperature
    if top_k is not None and top_k < x.shape[-1]:
        kth = x.topk(top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if top_p is not None and top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
        drop_sorted = before >= top_p  # keep the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def verify_chain(
    draft_tokens: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Verify a drafted chain: ``(n_accepted, next_token)``.

    Args:
        draft_tokens: (γ,) the drafted ids, ``x_j`` sampled from ``q[j]``.
        q: (γ, V) the draft distributions actually used to sample (never recomputed).
        p: (γ+1, V) the base distributions at the same positions plus the bonus position.
        generator: the random source for ``r_j`` and the residual/bonus draws. When every row
            of ``p`` is one-hot (greedy), no randomness is used.

    >>> p = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    >>> q = torch.tensor([[0.0, 1.0], [0.0, 1.0]])  # the draft's greedy picks: 1, 1
    >>> verify_chain(torch.tensor([1, 1]), q, p)  # x_2 = 1 mismatches argmax p_2 = 0
    (1, 0)
    """
    gamma = _check_chain(draft_tokens, q, p)
    for j, x in enumerate(draft_tokens.tolist()):
        px = float(p[j, x])
        qx = float(q[j, x])
        if px >= qx:  # r*q <= p for every r in [0, 1): no draw needed (also the greedy accept)
            continue
        if px > 0:  # p(x) == 0 rejects for every r > 0 (r == 0 has probability zero)
            r = float(torch.rand((), generator=generator, dtype=torch.float64))
            if r * qx <= px:
                continue
        return j, _draw(_residual(p[j], q[j]), generator)
    return gamma, _draw(p[gamma], generator)


def _check_chain(draft_tokens, q, p) -> int:
    if draft_tokens.dim() != 1:
        raise ValueError(f"draft_tokens: expected shape (gamma,), got {tuple(draft_tokens.shape)}")
    gamma = draft_tokens.shape[0]
    if q.dim() != 2 or q.shape[0] != gamma:
        raise ValueError(f"q: expected shape ({gamma}, V), got {tuple(q.shape)}")
    if p.dim() != 2 or p.shape != (gamma + 1, q.shape[1]):
        raise ValueError(f"p: expected shape ({gamma + 1}, {q.shape[1]}), got {tuple(p.shape)}")
    return gamma


def _accept_prob(px: float, qx: float) -> float:
    """P(accept x) = min(1, p(x)/q(x)): the rule :func:`verify_chain` draws against."""
    return 1.0 if px >= qx else px / qx


def _residual(pj: torch.Tensor, qj: torch.Tensor) -> torch.Tensor:
    """The law of the token emitted at a rejection: (p - q)+ normalised, p when it is zero."""
    residual = (pj - qj).clamp_min(0)
    total = float(residual.sum())
    return residual / total if total > 0 else pj


def chain_law(draft_tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The exact law of :func:`verify_chain`'s output for fixed drafted tokens: (γ+1, V).

    Entry ``[k, y]`` is P(n_accepted = k, next_token = y); rows sum to P(n_accepted = k). Built
    from the same acceptance and residual rules that :func:`verify_chain` samples from, so
    enumerating draft paths with it gives the exact law of the emitted tokens (the tests check it
    equals the base law to 1e-12).

    >>> p = torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    >>> q = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    >>> chain_law(torch.tensor([0]), q, p).tolist()  # accept 0 w.p. 1/2, else emit 1
    [[0.0, 0.5], [0.25, 0.25]]
    """
    gamma = _check_chain(draft_tokens, q, p)
    law = torch.zeros(gamma + 1, p.shape[1], dtype=p.dtype)
    alive = 1.0  # P(the first j tokens were accepted)
    for j, x in enumerate(draft_tokens.tolist()):
        a = _accept_prob(float(p[j, x]), float(q[j, x]))
        law[j] = (alive * (1.0 - a)) * _residual(p[j], q[j])
        alive *= a
    law[gamma] = alive * p[gamma]
    return law


def _draw(dist: torch.Tensor, generator: torch.Generator | None) -> int:
    top = int(dist.argmax())
    if float(dist[top]) >= 1.0:  # one-hot (greedy): deterministic, no random draw
        return top
    return int(torch.multinomial(dist.double(), 1, generator=generator))
