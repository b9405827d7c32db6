"""Initialise Zebra-Llama's mixers from a pretrained Llama attention layer.

* :func:`mla_from_attention` — X-EcoMLA's SVD init (``re_init_q`` / ``re_init_kv`` of the official
  code, re-derived from the spec): a truncated SVD of W_q for the query factors and a *joint* SVD
  of ``M = [W_k; W_v]`` (no head repetition) for the KV factors; the d_rope key dims are the
  head-mean of the last d_rope rows of W_k. ``o_proj`` is copied.
* :func:`mamba_from_attention` — MambaInLlama's init: the x / B / C rows of ``in_proj`` take W_v /
  W_k / W_q and ``out_proj`` takes W_o; z, dt, the conv, A and D stay at their random init.
* :func:`energy_rank` — X-EcoMLA's energy-based rank, rounded up to a multiple of 8.

The SVD runs in float64 (the official code uses float32 and full U/V; ``full_matrices=False`` here)
and the factors are cast to the attention's dtype.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .mamba2 import Mamba2FromAttention
from .mla import MLAAttention, MLAConfig, _llama_shape

__all__ = ["energy_rank", "mamba_from_attention", "mla_from_attention"]


def energy_rank(
    singular_values: torch.Tensor, tau: float, *, multiple: int = 8, max_rank: int | None = None
) -> int:
    """X-EcoMLA's rank: ``#{i : Σ_{j≤i} σ_j² / Σ σ² ≤ τ}``, at least 1, rounded **up** to ``multiple``.

    Args:
        singular_values: σ, 1-D, non-negative (any order; sorted descending here).
        tau: energy fraction in (0, 1].
        multiple: round the rank up to a multiple of this (8 in X-EcoMLA).
        max_rank: cap after rounding (default: ``len(σ)``).

    Example:
        >>> import torch
        >>> s = torch.tensor(
        ...     [50.0, 30.0, 10.0, 5.0, 3.0, 2.0], dtype=torch.float64
        ... ).sqrt()  # σ²: 100 in all
        >>> (
        ...     energy_rank(s, 0.9, multiple=1),
        ...     energy_rank(s, 0.9, max_rank=64),
        ... )  # 50+30+10 = 90%: 3, up to 8
        (3, 8)
    """
    if (
        not isinstance(singular_values, torch.Tensor)
        or singular_values.dim() != 1
        or singular_values.numel() == 0
    ):
        raise ValueError("singular_values: expected a non-empty 1-D tensor")
    if bool((singular_values < 0).any()) or not bool(torch.isfinite(singular_values).all()):
        raise ValueError("singular_values: expected finite, non-negative values")
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 < tau <= 1:
        raise ValueError(f"tau: expected an energy fraction in (0, 1], got {tau!r}")
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"multiple: expected a positive int, got {multiple!r}")
    n = singular_values.numel()
    max_rank = n if max_rank is None else max_rank
    energy = singular_values.double().sort(descending=True).values.square()
    cumulative = energy.cumsum(0) / energy.sum()
    r = max(1, int((cumulative <= tau).sum()))
    r = math.ceil(r / multiple) * multiple
    return min(r, max_rank)


def _check_attention(attn) -> None:
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        if not isinstance(getattr(attn, name, None), nn.Linear):
            raise TypeError(
                f"attn: expected a transformers LlamaAttention (q_proj, k_proj, v_proj, o_proj Linear), "
                f"got {type(attn).__name__} without {name}"
            )
    if not hasattr(attn, "config") or not hasattr(attn, "layer_idx"):
        raise TypeError(
            f"attn: expected a transformers LlamaAttention (with config and layer_idx), got {type(attn).__name__}"
        )


def _interleaved_to_half(d: int) -> torch.Tensor:
    """Row order [0, 2, 4, …, 1, 3, 5, …]: the official layer's permutation of the rope dims
    (interleaved pairs → halves) applied to the weights instead of at run time."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


@torch.no_grad()
def mla_from_attention(
    attn,
    config: MLAConfig,
    *,
    rank_energy: float | None = None,
    init: str = "svd",
) -> MLAAttention:
    """An :class:`MLAAttention` initialised from a Llama attention layer (a new module).

    ``init="svd"`` (X-EcoMLA):

    * Q: ``W_q = UΣVᵀ``; ``W_qA = Σ_{:r_q} Vᵀ_{:r_q}``, ``W_qB = U_{:, :r_q}``; per head, the first
      d_nope rows are q_nope and the last d_rope rows q_pe (needs d_nope + d_rope = d_h).
    * KV: ``M = [W_k; W_v] = UΣVᵀ`` (2·n_kv·d_h × d); ``W_kvA = [Σ_{:r_kv} Vᵀ_{:r_kv}; K̄]`` with K̄ the
      last d_rope rows of the KV-head mean of W_k; ``W_kvB`` per KV head: the first d_nope rows of its
      key block of U_{:, :r_kv}, then all d_h rows of its value block (needs d_v = d_h).
    * The rope rows (q_pe, K̄) are permuted interleaved → half-split, as the official layer does at
      run time. d_rope = 0 is handled explicitly (the official ``[-0:]`` slices select every row).
    * ``o_proj`` is copied.

    Exact at full rank with d_rope = 0 (v and k_nope equal V and K); the k/v product is the
    Eckart–Young best rank-r_kv approximation of M. Not function-preserving with RoPE (head-averaged
    k_pe, different pairing and frequencies): distillation repairs it.

    ``init="random"``: the same shapes, every weight drawn N(0, initializer_range) (the random-init
    ablation); no constraint on d_nope + d_rope.

    Args:
        attn: a ``LlamaAttention`` (q/k/v/o projections without bias).
        config: the ranks; with ``rank_energy`` its r_q and r_kv are replaced by energy ranks.
        rank_energy: τ in (0, 1]: r_q and r_kv become :func:`energy_rank` of σ(W_q) and σ(M)
            (rounded up to 8, capped at the largest rank the layer accepts). X-EcoMLA's energy
            rule; applying it to both factorisations is our reading.
        init: ``"svd"`` or ``"random"``.

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig
        >>> from transformers.models.llama.modeling_llama import LlamaAttention
        >>> llama = LlamaConfig(
        ...     hidden_size=32,
        ...     num_attention_heads=4,
        ...     num_key_value_heads=2,
        ...     num_hidden_layers=1,
        ...     intermediate_size=64,
        ...     vocab_size=16,
        ... )
        >>> mla = mla_from_attention(LlamaAttention(llama, 0), MLAConfig(16, 8, 4, 4, 8))
        >>> mla.kv_a_proj.weight.shape, mla.kv_b_proj.weight.shape
        (torch.Size([12, 32]), torch.Size([24, 8]))
    """
    _check_attention(attn)
    if not isinstance(config, MLAConfig):
        raise TypeError(f"config: expected an MLAConfig, got {type(config).__name__}")
    if init not in ("svd", "random"):
        raise ValueError(f"init: expected 'svd' or 'random', got {init!r}")
    llama = attn.config
    d, n_h, n_kv, d_h = _llama_shape(llama)
    weight = attn.q_proj.weight
    w_q = weight.detach().double()
    w_kv = (
        torch.cat([attn.k_proj.weight, attn.v_proj.weight]).detach().double()
    )  # M, 2·n_kv·d_h × d
    if rank_energy is not None:
        if (
            isinstance(rank_energy, bool)
            or not isinstance(rank_energy, (int, float))
            or not 0 < rank_energy <= 1
        ):
            raise ValueError(
                f"rank_energy: expected an energy fraction in (0, 1], got {rank_energy!r}"
            )
        r_q = energy_rank(torch.linalg.svdvals(w_q), rank_energy, max_rank=min(n_h * d_h, d))
        r_kv = energy_rank(torch.linalg.svdvals(w_kv), rank_energy, max_rank=min(2 * n_kv * d_h, d))
        config = MLAConfig(r_q, r_kv, config.d_nope, config.d_rope, config.d_v, config.rope_scaling)
    c = config
    if init == "svd":
        if any(getattr(attn, p).bias is not None for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
            raise ValueError(
                "attn: the SVD init needs bias-free projections (attention_bias=False)"
            )
        if c.d_nope + c.d_rope != d_h:
            raise ValueError(
                f"d_nope, d_rope: the SVD init splits each head's d_h = {d_h} query/key rows, so d_nope + d_rope "
                f"must equal it, got {c.d_nope} + {c.d_rope}"
            )
        if c.d_v != d_h:
            raise ValueError(
                f"d_v: the SVD init keeps every value row of a head, so d_v must equal d_h = {d_h}, got {c.d_v}"
            )
        if c.r_q > min(n_h * d_h, d):
            raise ValueError(
                f"r_q: expected at most min(n_h·d_h, d) = {min(n_h * d_h, d)} (the rank of W_q), got {c.r_q}"
            )
    mla = MLAAttention(c, llama, attn.layer_idx)  # checks r_kv
    mla.to(device=weight.device, dtype=weight.dtype)
    if init == "random":
        std = float(getattr(llama, "initializer_range", 0.02))
        for p in mla.parameters():
            nn.init.normal_(p, std=std) if p.dim() > 1 else nn.init.zeros_(p)
        return mla

    # Q
    u, s, vh = torch.linalg.svd(w_q, full_matrices=False)
    q_a = s[: c.r_q, None] * vh[: c.r_q]
    q_b = u[:, : c.r_q].reshape(n_h, d_h, c.r_q)
    if c.d_rope:
        perm = _interleaved_to_half(c.d_rope)
        q_b = torch.cat([q_b[:, : c.d_nope], q_b[:, c.d_nope :][:, perm]], dim=1)
    mla.q_a_proj.weight.copy_(q_a)
    mla.q_b_proj.weight.copy_(q_b.reshape(n_h * d_h, c.r_q))
    # KV: one joint SVD of [W_k; W_v]
    u, s, vh = torch.linalg.svd(w_kv, full_matrices=False)
    kv_a = s[: c.r_kv, None] * vh[: c.r_kv]
    if c.d_rope:
        k_mean = w_kv[: n_kv * d_h].reshape(n_kv, d_h, d).mean(0)
        kv_a = torch.cat([kv_a, k_mean[d_h - c.d_rope :][_interleaved_to_half(c.d_rope)]])
    u_r = u[:, : c.r_kv]
    key_block = u_r[: n_kv * d_h].reshape(n_kv, d_h, c.r_kv)
    value_block = u_r[n_kv * d_h :].reshape(n_kv, d_h, c.r_kv)
    kv_b = torch.cat([key_block[:, : c.d_nope], value_block], dim=1)  # [n_kv, d_nope + d_h, r_kv]
    mla.kv_a_proj.weight.copy_(kv_a)
    mla.kv_b_proj.weight.copy_(kv_b.reshape(n_kv * (c.d_nope + d_h), c.r_kv))
    mla.o_proj.weight.copy_(attn.o_proj.weight)
    return mla


@torch.no_grad()
def mamba_from_attention(
    attn, *, init: str = "attention", d_conv: int = 4, chunk_size: int = 64
) -> Mamba2FromAttention:
    """A :class:`Mamba2FromAttention` initialised from a Llama attention layer (a new module).

    ``init="attention"``: in ``in_proj``, x ← W_v, B ← W_k, C ← W_q (bit for bit), and
    ``out_proj`` ← W_o; the z and dt rows, the conv, A_log, dt_bias and D keep the layer's random
    init (without decay, conv and gate the layer is linear attention with q = C, k = B, v = x:
    why the copy helps; it is not function-preserving). ``init="random"``: nothing copied.

    Example:
        >>> from transformers import LlamaConfig
        >>> from transformers.models.llama.modeling_llama import LlamaAttention
        >>> llama = LlamaConfig(
        ...     hidden_size=32,
        ...     num_attention_heads=4,
        ...     num_key_value_heads=2,
        ...     num_hidden_layers=1,
        ...     intermediate_size=64,
        ...     vocab_size=16,
        ... )
        >>> attn = LlamaAttention(llama, 0)
        >>> mamba = mamba_from_attention(attn)
        >>> bool((mamba.in_proj.weight[32:48] == attn.v_proj.weight).all())
        True
    """
    _check_attention(attn)
    if init not in ("attention", "random"):
        raise ValueError(f"init: expected 'attention' or 'random', got {init!r}")
    weight = attn.q_proj.weight
    mamba = Mamba2FromAttention(attn.config, attn.layer_idx, d_conv, chunk_size=chunk_size).to(
        device=weight.device, dtype=weight.dtype
    )
    if init == "random":
        return mamba
    if any(getattr(attn, p).bias is not None for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
        raise ValueError(
            "attn: the attention init needs bias-free projections (attention_bias=False)"
        )
    d_inner, d_xb = mamba.d_inner, mamba.d_xb
    rows = mamba.in_proj.weight
    rows[d_inner : d_inner + d_xb].copy_(attn.v_proj.weight)
    rows[d_inner + d_xb : d_inner + 2 * d_xb].copy_(attn.k_proj.weight)
    rows[d_inner + 2 * d_xb : 2 * d_inner + 2 * d_xb].copy_(attn.q_proj.weight)
    mamba.out_proj.weight.copy_(attn.o_proj.weight)
    return mamba
