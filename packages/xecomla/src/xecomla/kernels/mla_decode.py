"""Triton absorbed-MLA decode: one query token per (batch, head) against the latent cache.

Split-T (flash-decoding): program (bh, split) scans its slice of the S cached tokens in tiles of
BLOCK_T with an online softmax over ``score = (q̃·c_kv + q_pe·k_pe)·scale`` and writes its partial
(max m, sum l, context acc = Σ p·c_kv); the partials are merged with a log-sum-exp in torch. All
arithmetic is fp32; pointer arithmetic only (no block pointers), no ``tl.dot`` (the scores of one
query are row-wise dot products), so it runs under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _mla_decode_split_kernel(
    q_ptr, qpe_ptr, ckv_ptr, kpe_ptr, m_ptr, l_ptr, acc_ptr,
    S, H, R, P, chunk, scale,
    s_qb, s_qh, s_qr,
    s_pb, s_ph, s_pp,
    s_cb, s_ct, s_cr,
    s_kb, s_kt, s_kp,
    n_splits,
    BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_P: tl.constexpr, HAS_PE: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_r = tl.arange(0, BLOCK_R)
    mask_r = offs_r < R
    q = tl.load(q_ptr + b * s_qb + h * s_qh + offs_r * s_qr, mask=mask_r, other=0.0).to(tl.float32)
    offs_p = tl.arange(0, BLOCK_P)
    mask_p = offs_p < P
    if HAS_PE:
        qpe = tl.load(qpe_ptr + b * s_pb + h * s_ph + offs_p * s_pp, mask=mask_p, other=0.0).to(
            tl.float32
        )
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_R], dtype=tl.float32)
    start = split * chunk
    end = tl.minimum(start + chunk, S)
    for t0 in range(start, end, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        mask_t = offs_t < end
        c = tl.load(
            ckv_ptr + b * s_cb + offs_t[:, None] * s_ct + offs_r[None, :] * s_cr,
            mask=mask_t[:, None] & mask_r[None, :],
            other=0.0,
        ).to(tl.float32)
        score = tl.sum(c * q[None, :], axis=1)
        if HAS_PE:
            k = tl.load(
                kpe_ptr + b * s_kb + offs_t[:, None] * s_kt + offs_p[None, :] * s_kp,
                mask=mask_t[:, None] & mask_p[None, :],
                other=0.0,
            ).to(tl.float32)
            score += tl.sum(k * qpe[None, :], axis=1)
        score = tl.where(mask_t, score * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(score, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(score - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * c, axis=0)
        m_i = m_new
    out = bh * n_splits + split
    tl.store(m_ptr + out, m_i)
    tl.store(l_ptr + out, l_i)
    tl.store(acc_ptr + out * BLOCK_R + offs_r, acc, mask=mask_r)


def mla_decode_triton(
    q_abs, q_pe, c_kv, k_pe, scale: float, *, n_splits: int | None = None, block_t: int = 16
):
    """Latent context [B, H, R] (fp32) of one query per head; see :func:`xecomla.ops.mla_decode`."""
    B, H, R = q_abs.shape
    S, P = c_kv.shape[1], k_pe.shape[-1]
    if n_splits is None:
        n_splits = max(1, min(16, triton.cdiv(S, 256)))
    chunk = triton.cdiv(S, n_splits)
    block_r = triton.next_power_of_2(R)
    block_p = max(triton.next_power_of_2(max(P, 1)), 1)
    dev = q_abs.device
    m = torch.empty(B * H, n_splits, device=dev, dtype=torch.float32)
    l = torch.empty_like(m)  # noqa: E741
    acc = torch.empty(B * H, n_splits, block_r, device=dev, dtype=torch.float32)
    _mla_decode_split_kernel[(B * H, n_splits)](
        q_abs, q_pe, c_kv, k_pe, m, l, acc,
        S, H, R, P, chunk, float(scale),
        *q_abs.stride(), *q_pe.stride(), *c_kv.stride(), *k_pe.stride(),
        n_splits,
        BLOCK_T=block_t, BLOCK_R=block_r, BLOCK_P=block_p, HAS_PE=P > 0,
    )  # fmt: skip
    # log-sum-exp merge of the splits (an empty split has m = -inf, l = 0)
    m_max = m.max(dim=1, keepdim=True).values
    w = torch.exp(m - m_max)
    context = (acc[..., :R] * w[..., None]).sum(1) / (l * w).sum(1, keepdim=True)
    return context.view(B, H, R)
