"""The forward area S₁ and the annealing area S₂ of an LR schedule (float64, O(T), no Python loop).

S₁(s) = Σ_{i=0}^{s} η_i (the reference code includes η₀; the paper writes Σ_{i=1}^{s}).
S₂(s) = Σ_{i=1}^{s} m_i with m₀ = 0 and m_i = λ·m_{i−1} + Δ_i, Δ_i = η_{i−1} − η_i.

The momentum ``m`` is ``scipy.signal.lfilter([1], [1, −λ], Δ)`` (Δ₀ = 0, so m₀ = 0), the exact
first-order recursion in C. The tempting closed form ``cumsum(Δ·λ^−k)·λ^s`` is *not* used: λ^−k
overflows float32 past k ≈ 88/|ln λ| ≈ 8.8·10⁴ steps at λ = 0.999 (and float64 past 7·10⁵).
:func:`s2_torch` is a chunked scan for batches of schedules on any torch device.

Example:

    >>> import numpy as np
    >>> from lrannealing import areas
    >>> S1, S2 = areas(np.array([1.0, 1.0, 0.5, 0.5]), decay=0.5)
    >>> S1.tolist(), S2.tolist()
    ([1.0, 2.0, 2.5, 3.0], [0.0, 0.0, 0.5, 0.75])
"""

from __future__ import annotations

import numpy as np

from lrannealing._checks import as_lrs, check_choice, check_decay, check_int

__all__ = ["DEFAULT_DECAY", "WARMUP_MODES", "areas", "effective_lrs", "s2_lfilter", "s2_torch"]

#: λ of the paper and of the authors' follow-up (arXiv 2505.07796).
DEFAULT_DECAY = 0.999
WARMUP_MODES = ("as_peak", "actual")


def effective_lrs(lrs, warmup_steps: int = 0, warmup: str = "as_peak") -> np.ndarray:
    """The LRs the areas are computed from: with ``"as_peak"`` the warm-up steps count as the peak.

    The peak is the largest LR up to the end of warm-up (step ``warmup_steps``).
    """
    arr = as_lrs(lrs)
    warmup_steps = check_int(warmup_steps, "warmup_steps", 0)
    check_choice(warmup, "warmup", WARMUP_MODES)
    if warmup_steps >= arr.size:
        raise ValueError(f"warmup_steps: expected < len(lrs)={arr.size}, got {warmup_steps}")
    if warmup == "as_peak" and warmup_steps > 0:
        arr[:warmup_steps] = arr[: warmup_steps + 1].max()
    return arr


def s2_lfilter(lrs: np.ndarray, decay: float) -> np.ndarray:
    """S₂ of an already-checked float64 LR array (no warm-up handling): lfilter then cumsum."""
    from scipy.signal import lfilter

    delta = np.zeros_like(lrs)
    delta[1:] = lrs[:-1] - lrs[1:]
    momentum = lfilter([1.0], [1.0, -decay], delta)
    return np.cumsum(momentum)


def areas(
    lrs,
    decay: float = DEFAULT_DECAY,
    warmup_steps: int = 0,
    warmup: str = "as_peak",
    s1_include_step0: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``(S1, S2)`` of a schedule, each of length ``len(lrs)`` (step 0..T).

    Args:
        lrs: (T+1,) learning rates of steps 0..T, >= 0 (numpy, list or torch tensor).
        decay: λ ∈ [0, 1), the momentum of the annealing area (0.999 in the paper).
        warmup_steps: the length of the linear warm-up at the start of ``lrs``.
        warmup: ``"as_peak"`` (the reference: warm-up steps count as the peak LR, so the ramp adds
            nothing to S₂) or ``"actual"`` (the LRs as given).
        s1_include_step0: include η₀ in S₁ (the reference code) or not (the paper's formula).

    Returns:
        ``(S1, S2)``, float64 arrays of shape (T+1,).
    """
    decay = check_decay(decay)
    if not isinstance(s1_include_step0, bool):
        raise TypeError(f"s1_include_step0: expected a bool, got {type(s1_include_step0).__name__}")
    eff = effective_lrs(lrs, warmup_steps, warmup)
    s1 = np.cumsum(eff)
    if not s1_include_step0:
        s1 = s1 - eff[0]
    return s1, s2_lfilter(eff, decay)


def _decay_matrix(n: int, decay, dtype, device):
    import torch

    idx = torch.arange(n, device=device)
    power = (idx[:, None] - idx[None, :]).to(dtype)
    lower = power >= 0
    base = torch.as_tensor(decay, dtype=dtype, device=device)
    # λ^(i−j) below the diagonal, 0 above; 0**0 = 1 handles λ = 0.
    return torch.where(
        lower, base ** power.clamp(min=0), torch.zeros((), dtype=dtype, device=device)
    )


def _linear_scan(x, decay: float, chunk: int):
    """m_i = λ·m_{i−1} + x_i along the last axis, by chunks: a (chunk × chunk) matmul inside each
    chunk, the chunks' end states by the same scan one level up (with λ^chunk)."""
    import torch

    n = x.shape[-1]
    if n <= chunk:
        return x @ _decay_matrix(n, decay, x.dtype, x.device).T
    pad = (-n) % chunk
    xp = torch.nn.functional.pad(x, (0, pad))
    blocks = xp.reshape(*x.shape[:-1], -1, chunk)
    intra = blocks @ _decay_matrix(chunk, decay, x.dtype, x.device).T
    ends = _linear_scan(intra[..., -1], decay**chunk, chunk)
    carry = torch.nn.functional.pad(ends[..., :-1], (1, 0))
    powers = torch.as_tensor(decay, dtype=x.dtype, device=x.device) ** torch.arange(
        1, chunk + 1, dtype=x.dtype, device=x.device
    )
    out = intra + carry[..., None] * powers
    return out.reshape(*x.shape[:-1], -1)[..., :n]


def s2_torch(lrs, decay: float = DEFAULT_DECAY, chunk: int = 256):
    """S₂ of a batch of schedules ``lrs`` (..., T+1) in torch (any device, float32 or float64).

    A chunked scan: O(T·chunk) work as matmuls, no λ^−k term (nothing overflows), depth
    log_chunk(T). Warm-up handling is the caller's (pass :func:`effective_lrs`).

    Example:
        >>> import torch
        >>> s2_torch(torch.tensor([1.0, 1.0, 0.5, 0.5], dtype=torch.float64), decay=0.5).tolist()
        [0.0, 0.0, 0.5, 0.75]
    """
    import torch

    if not isinstance(lrs, torch.Tensor):
        raise TypeError(f"lrs: expected a torch.Tensor, got {type(lrs).__name__}")
    if not lrs.is_floating_point() or lrs.ndim < 1 or lrs.shape[-1] < 1:
        raise ValueError(
            f"lrs: expected a floating tensor (..., T+1), got {lrs.dtype} {tuple(lrs.shape)}"
        )
    decay = check_decay(decay)
    chunk = check_int(chunk, "chunk", 2)
    delta = torch.zeros_like(lrs)
    delta[..., 1:] = lrs[..., :-1] - lrs[..., 1:]
    return torch.cumsum(_linear_scan(delta, decay, chunk), dim=-1)
