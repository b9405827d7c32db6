"""Naive, readable reference of NanoAdam: the spec in code (float64-capable).

* :func:`select_reference` — per-chunk bottom-k of a key with ties to the lowest index, written
  with a plain Python loop over chunks and a stable sort (the definition, not the fast path).
* :func:`masked_adam_reference` — dense masked Adam in the parameter's own dtype: the moments and
  per-entry ages are full-size tensors, entries that enter the mask start from zero state, entries
  outside the mask are never touched. The compact optimizer must equal it.
"""

from __future__ import annotations

import math

import torch


def chunk_counts(numel: int, density: float, chunk_size: int | None) -> list[int]:
    """``[⌈k·ℓ⌉ for each chunk]``: how many entries each chunk of a ``numel`` tensor selects."""
    c = numel if chunk_size is None else chunk_size
    out = []
    for start in range(0, numel, c):
        length = min(c, numel - start)
        out.append(min(length, math.ceil(density * length - 1e-12)))
    return out


def select_reference(key: torch.Tensor, density: float, chunk_size: int | None) -> torch.Tensor:
    """Sorted flat indices of the ⌈k·ℓ⌉ smallest ``key`` entries of every chunk (ties: lowest index)."""
    flat = key.reshape(-1)
    c = flat.numel() if chunk_size is None else chunk_size
    picked = []
    for start, count in zip(range(0, flat.numel(), c), chunk_counts(flat.numel(), density, c)):
        chunk = flat[start : start + c]
        order = sorted(range(chunk.numel()), key=lambda i: (float(chunk[i]), i))
        picked.extend(start + i for i in order[:count])
    return torch.tensor(sorted(picked), dtype=torch.long)


def masked_adam_reference(
    param: torch.Tensor,
    grads: list[torch.Tensor],
    masks: list[torch.Tensor],
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    mode: str = "remap",
) -> torch.Tensor:
    """Run ``len(grads)`` masked AdamW steps on a copy of ``param`` and return it.

    ``masks[t]`` (bool, like ``param``) is the selection in force at step ``t``. ``mode``:
    ``"remap"`` keeps m, v and age of retained entries and zeroes newcomers; ``"reset"`` zeroes
    all state whenever the mask changes. (``"positional"`` is slot-based and has no dense form.)
    """
    if mode not in ("remap", "reset"):
        raise ValueError(f"mode: expected 'remap' or 'reset', got {mode!r}")
    b1, b2 = betas
    p = param.detach().clone()
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    age = torch.zeros_like(p)
    prev = torch.zeros_like(p, dtype=torch.bool)
    for g, mask in zip(grads, masks):
        if mode == "reset" and not torch.equal(mask, prev):
            m.zero_(), v.zero_(), age.zero_()
        leaving = prev & ~mask
        m[leaving], v[leaving], age[leaving] = 0.0, 0.0, 0.0
        prev = mask.clone()
        s = mask
        age[s] += 1
        p[s] = p[s] * (1 - lr * weight_decay)
        m[s] = b1 * m[s] + (1 - b1) * g[s]
        v[s] = b2 * v[s] + (1 - b2) * g[s] * g[s]
        m_hat = m[s] / (1 - b1 ** age[s])
        v_hat = v[s] / (1 - b2 ** age[s])
        p[s] = p[s] - lr * m_hat / (v_hat.sqrt() + eps)
    return p
