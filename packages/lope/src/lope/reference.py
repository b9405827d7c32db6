"""Naive, readable reference implementations of lope: the spec in code (float64-capable).

Everything here loops over experts (and, for the compensation, over tokens) so that each line
reads like the spec (``shared/methods/lope.md`` §2). The ops in ``ops.py`` are tested against
these functions in float64.
"""

from __future__ import annotations

import torch

__all__ = [
    "adapter_reference",
    "compensate_reference",
    "expert_mix_reference",
    "gates_reference",
]


def expert_mix_reference(
    h: torch.Tensor, gates: torch.Tensor, B: torch.Tensor, scaling: float
) -> torch.Tensor:
    """``y_t = scaling · Σ_n g_{t,n} · B_n h_t``, one expert at a time.

    Args:
        h: ``[T, r]`` low-rank activations ``A·x``.
        gates: ``[T, N]`` router weights.
        B: ``[N, out, r]`` up-projections.
        scaling: ``α / r``.

    Returns:
        ``[T, out]`` in the dtype of ``h``.
    """
    out = torch.zeros(h.shape[0], B.shape[1], dtype=h.dtype, device=h.device)
    for n in range(B.shape[0]):
        out = out + gates[:, n : n + 1].to(h.dtype) * (h @ B[n].T)
    return scaling * out


def compensate_reference(
    gates: torch.Tensor,
    expert_out: torch.Tensor,
    poison: tuple[int, ...],
    k: int,
    beta: float,
) -> torch.Tensor:
    """DyCompEnSate as reconstructed in the spec, one token at a time.

    With ``P`` the poisoning experts and ``ω_P = Σ_{d∈P} ω_d``, the poisoning direction is
    ``y_P = Σ_{d∈P} ω_d y_d`` (for one poisoning expert, ``cos(y_i, y_P) = cos(y_i, y_D)``).
    ``θ_i = cos(y_i, y_P)``; ``S_K`` = the ``k`` normal experts with the largest ``θ_i``;
    ``ω̃_i = ω_i + β·ω_P·θ⁺_i / Σ_{j∈S_K} θ⁺_j`` on ``S_K``, ``ω̃_d = 0`` on ``P``. Where
    ``Σ θ⁺ = 0`` the mass ``β·ω_P`` is spread over all normal experts in proportion to ``ω_i``.
    ``k = 0`` is plain masking.

    Args:
        gates: ``[T, N]`` softmax router weights.
        expert_out: ``[T, N, out]`` per-expert outputs ``y_i = B_i h``.
        poison: indices of the poisoning experts.
        k: number of compensating experts (``0 ≤ k ≤ N − |P|``).
        beta: compensation strength (``β ≥ 0``).

    Returns:
        ``[T, N]`` compensated gates.
    """
    T, N = gates.shape
    normal = [i for i in range(N) if i not in poison]
    result = gates.clone()
    for t in range(T):
        omega = gates[t]
        mass = sum(omega[d] for d in poison)
        y_poison = sum(omega[d] * expert_out[t, d] for d in poison)
        row = omega.clone()
        for d in poison:
            row[d] = 0.0
        if k > 0:
            theta = {}
            for i in normal:
                y_i = expert_out[t, i]
                denominator = torch.linalg.vector_norm(y_i) * torch.linalg.vector_norm(y_poison)
                theta[i] = (y_i @ y_poison) / denominator if denominator > 0 else 0.0 * mass
            chosen = sorted(normal, key=lambda i: float(theta[i].detach()), reverse=True)[:k]
            positive = {i: torch.clamp(theta[i], min=0) for i in chosen}
            total = sum(positive.values())
            if total > 0:
                for i in chosen:
                    row[i] = row[i] + beta * mass * positive[i] / total
            else:
                normal_mass = sum(omega[i] for i in normal)
                for i in normal:
                    row[i] = row[i] + beta * mass * omega[i] / normal_mass
        result[t] = row
    return result


def gates_reference(
    x: torch.Tensor, h: torch.Tensor, router: torch.Tensor, router_input: str
) -> torch.Tensor:
    """``ω = softmax(W_g · x)`` (``router_input="x"``) or ``softmax(W_g · h)`` (``"lowrank"``)."""
    source = x if router_input == "x" else h
    return torch.softmax(source @ router.T, dim=-1)


def adapter_reference(
    x: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    router: torch.Tensor,
    scaling: float,
    poison: tuple[int, ...] = (),
    mode: str = "all",
    k: int = 0,
    beta: float = 1.0,
    router_input: str = "x",
) -> torch.Tensor:
    """The adapter's addition ``(α/r)·Σ_i ω̃_i B_i A x`` for ``[T, in]`` tokens (no dropout).

    ``mode="inference"`` masks the poisoning experts and compensates (``compensate_reference``);
    every other mode mixes all experts with the softmax gates (training modes differ only in which
    parameters train).
    """
    h = x @ A.T
    gates = gates_reference(x, h, router, router_input)
    if mode == "inference" and poison:
        expert_out = torch.stack([h @ B[n].T for n in range(B.shape[0])], dim=1)
        gates = compensate_reference(gates, expert_out, poison, k, beta)
    return expert_mix_reference(h, gates, B, scaling)
