"""Launchers and the ``torch.autograd.Function`` around the Triton TFLA kernels.

Gate gradients come from dq and dk by two identities of the chunkwise graph (``m`` detached):
the output depends on the log input weight ĩ_s only through ``exp(ĩ_s)·k_s`` and on the log forget
gates only through the global cumulative sum ``F_t`` via ``exp(F_t)·q_t``, ``exp(-F_s)·k_s`` and
``exp(F_S)`` in the returned last state, so::

    dĩ_s   = k_s · dk_s
    dF_t   = q_t · dq_t - k_t · dk_t      (+ <dC_S, C_S> + <dn_S, n_S> at the last step)
    dlogσ(f̃)_r = Σ_{t ≥ r} dF_t           (a reverse cumulative sum)
    dm0    = <dC0, C0> + <dn0, n0>        (the initial state enters as exp(m0)·C0, exp(m0)·n0)

These hold for the exact and the detached-denominator backward alike (``dq``, ``dk`` of each).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton

from neurips25_core.device import kernel_buffer, triton_interpret

__all__ = ["mlstm_triton"]


def _buffer(*shape: int, device) -> torch.Tensor:
    """A float32 buffer the kernels fill (NaN-poisoned under the interpreter: core's kernel_buffer)."""
    return kernel_buffer(*shape, dtype=torch.float32, device=device)


def _p2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _blocks(L, Dk, Dv, block_lq, block_lkv, block_dqk, block_dv):
    blq = block_lq or min(64, L)
    blkv = block_lkv or min(64, L)
    bk = block_dqk or max(16, min(64, _p2(Dk)))
    bv = block_dv or max(16, min(128, _p2(Dv)))
    for name, val in (("block_lq", blq), ("block_lkv", blkv), ("block_dqk", bk), ("block_dv", bv)):
        if val < 16 or val & (val - 1):
            raise ValueError(f"{name}: expected a power of two >= 16, got {val}")
    if blq > L or blkv > L:
        raise ValueError(
            f"block_lq/block_lkv: expected tiles no longer than the chunk ({L}), got {blq}/{blkv}"
        )
    return blq, blkv, bk, bv


class _TFLAFunction(torch.autograd.Function):
    """Core op on padded inputs. q, k: (B,H,S,Dk); v: (B,H,S,Dv); lf, li: (B,H,S) float32 gates."""

    @staticmethod
    def forward(ctx, q, k, v, lf, li, c0, n0, m0, cfg):
        L, blq, blkv, bk, bv, stabilize, normalize, eps, _detach_den, lowp, prec, scale = cfg
        from tfla.kernels.tfla_kernels import _fw_intra_kernel, _fw_state_kernel

        B, H, S, Dk = q.shape
        Dv = v.shape[-1]
        NC = S // L
        BH = B * H
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        b = lf.reshape(BH, NC, L).cumsum(-1).reshape(BH, S).contiguous()
        li_ = li.reshape(BH, S).contiguous()
        dev = q.device
        Cs = _buffer(BH, NC + 1, Dk, Dv, device=dev)
        Ns = _buffer(BH, NC + 1, Dk, device=dev)
        Ms = _buffer(BH, NC + 1, device=dev)
        Cs[:, 0] = c0.reshape(BH, Dk, Dv)
        Ns[:, 0] = n0.reshape(BH, Dk)
        Ms[:, 0] = m0.reshape(BH)
        bl = min(64, L)
        grid = (triton.cdiv(Dk, bk), triton.cdiv(Dv, bv), BH)
        _fw_state_kernel[grid](
            k, v, b, li_, Cs, Ns, Ms, S, Dk, Dv, NC,
            L=L, BL=bl, BK=bk, BV=bv, STABILIZE=stabilize, LOWP=lowp, PREC=prec, num_warps=4, num_stages=1,
        )  # fmt: skip
        hbuf = _buffer(BH, S, Dv, device=dev)
        den = _buffer(BH, S, device=dev)
        mcomb = _buffer(BH, S, device=dev)
        grid = (triton.cdiv(Dv, bv), L // blq, NC * BH)
        _fw_intra_kernel[grid](
            q, k, v, b, li_, Cs, Ns, Ms, hbuf, den, mcomb, S, Dk, Dv, NC, scale, eps,
            L=L, BLQ=blq, BLKV=blkv, BK=bk, BV=bv, STABILIZE=stabilize, NORMALIZE=normalize,
            LOWP=lowp, PREC=prec, num_warps=4, num_stages=1,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, b, li_, Cs, Ns, Ms, hbuf, den, mcomb, c0, n0)
        ctx.cfg = cfg
        C_last = Cs[:, NC].reshape(B, H, Dk, Dv).clone()
        n_last = Ns[:, NC].reshape(B, H, Dk).clone()
        m_last = Ms[:, NC].reshape(B, H, 1).clone()
        ctx.mark_non_differentiable(m_last)
        return hbuf.reshape(B, H, S, Dv).to(q.dtype), C_last, n_last, m_last

    @staticmethod
    def backward(ctx, dh, dC_last, dn_last, _dm_last):
        L, blq, blkv, bk, bv, stabilize, normalize, eps, detach_den, lowp, prec, scale = ctx.cfg
        from tfla.kernels.tfla_kernels import (
            _bw_dk_kernel,
            _bw_dq_kernel,
            _bw_dv_kernel,
            _bw_state_kernel,
        )

        q, k, v, b, li_, Cs, Ns, Ms, hbuf, den, mcomb, c0, n0 = ctx.saved_tensors
        B, H, S, Dk = q.shape
        Dv = v.shape[-1]
        NC = S // L
        BH = B * H
        dev = q.device
        dh = (torch.zeros(BH, S, Dv, device=dev) if dh is None else dh.reshape(BH, S, Dv)).float()
        if normalize:
            clamp = torch.exp(-mcomb) if stabilize else torch.ones_like(mcomb)
            d = torch.maximum(den.abs(), clamp) + eps
            dnum = (dh / d[..., None]).contiguous()
            if detach_den:
                dden = torch.zeros_like(den)
            else:
                # h = num / d with d = max(|den|, clamp) + eps: d(den) = -sign(den)·[|den|>clamp]·(dh·h)/d
                dden = (
                    -torch.sign(den) * (den.abs() > clamp) * (dh * hbuf).sum(-1) / d
                ).contiguous()
        else:
            dnum = dh.contiguous()
            dden = torch.zeros_like(den)
        DCs = _buffer(BH, NC + 1, Dk, Dv, device=dev)
        DNs = _buffer(BH, NC + 1, Dk, device=dev)
        DCs[:, NC] = 0.0 if dC_last is None else dC_last.reshape(BH, Dk, Dv).float()
        DNs[:, NC] = 0.0 if dn_last is None else dn_last.reshape(BH, Dk).float()
        bl = min(64, L)
        common = dict(num_warps=4, num_stages=1)
        _bw_state_kernel[(triton.cdiv(Dk, bk), triton.cdiv(Dv, bv), BH)](
            q, b, Ms, mcomb, dnum, dden, DCs, DNs, S, Dk, Dv, NC, scale,
            L=L, BL=bl, BK=bk, BV=bv, STABILIZE=stabilize, LOWP=lowp, PREC=prec, **common,
        )  # fmt: skip
        dq = _buffer(BH, S, Dk, device=dev)
        dk = _buffer(BH, S, Dk, device=dev)
        dv = _buffer(BH, S, Dv, device=dev)
        _bw_dq_kernel[(triton.cdiv(Dk, bk), L // blq, NC * BH)](
            k, v, b, li_, Cs, Ns, Ms, mcomb, dnum, dden, dq, S, Dk, Dv, NC, scale,
            L=L, BLQ=blq, BLKV=blkv, BK=bk, BV=bv, LOWP=lowp, PREC=prec, **common,
        )  # fmt: skip
        _bw_dk_kernel[(triton.cdiv(Dk, bk), L // blkv, NC * BH)](
            q, v, b, li_, Ms, mcomb, dnum, dden, DCs, DNs, dk, S, Dk, Dv, NC, scale,
            L=L, BLQ=blq, BLKV=blkv, BK=bk, BV=bv, STABILIZE=stabilize, LOWP=lowp, PREC=prec, **common,
        )  # fmt: skip
        _bw_dv_kernel[(triton.cdiv(Dv, bv), L // blkv, NC * BH)](
            q, k, b, li_, Ms, mcomb, dnum, DCs, dv, S, Dk, Dv, NC, scale,
            L=L, BLQ=blq, BLKV=blkv, BK=bk, BV=bv, STABILIZE=stabilize, LOWP=lowp, PREC=prec, **common,
        )  # fmt: skip
        # Gate gradients by the identities in the module docstring.
        qf, kf = q.reshape(BH, S, Dk).float(), k.reshape(BH, S, Dk).float()
        dli = (kf * dk).sum(-1)
        dF = (qf * dq).sum(-1) - dli
        last = (DCs[:, NC] * Cs[:, NC]).sum((-1, -2)) + (DNs[:, NC] * Ns[:, NC]).sum(-1)
        dF[:, -1] += last
        dlf = torch.flip(torch.cumsum(torch.flip(dF, [1]), 1), [1])
        dC0 = DCs[:, 0].reshape(B, H, Dk, Dv)
        dn0 = DNs[:, 0].reshape(B, H, Dk)
        dm0 = ((dC0 * c0).sum((-1, -2)) + (dn0 * n0).sum(-1))[..., None] if stabilize else None
        return (
            dq.reshape(B, H, S, Dk).to(q.dtype),
            dk.reshape(B, H, S, Dk).to(k.dtype),
            dv.reshape(B, H, S, Dv).to(v.dtype),
            dlf.reshape(B, H, S),
            dli.reshape(B, H, S),
            dC0,
            dn0,
            dm0,
            None,
        )


def mlstm_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    i: torch.Tensor,
    f: torch.Tensor,
    *,
    variant: str = "exp",
    chunk_size: int = 64,
    normalize: bool = True,
    c0: torch.Tensor | None = None,
    n0: torch.Tensor | None = None,
    m0: torch.Tensor | None = None,
    eps: float = 1e-6,
    qk_scale: float | None = None,
    detach_denominator: bool = False,
    return_last_state: bool = False,
    block_lq: int | None = None,
    block_lkv: int | None = None,
    block_dqk: int | None = None,
    block_dv: int | None = None,
    fp32_precision: str = "ieee",
):
    """The mLSTM through the Triton TFLA kernels (arguments as :func:`tfla.mlstm`, assumed checked).

    Extra tiling arguments (powers of two >= 16; tiles no longer than the chunk): ``block_lq`` and
    ``block_lkv`` tile the chunk along queries and keys/values (default ``min(64, chunk_size)``),
    ``block_dqk``/``block_dv`` tile the head dims (default 64/128, clipped to the next power of two
    of the head dim). ``fp32_precision`` is ``"ieee"`` (default) or ``"tf32"`` for float32 inputs on
    GPU; bf16/fp16 inputs use tensor cores with float32 accumulation on GPU and are upcast under
    the interpreter (which has no correct low-precision ``tl.dot``).

    Any sequence length: the sequence is padded to a multiple of the chunk with neutral steps
    (q = k = v = 0, logσ(f̃) = 0, input weight exp(-inf) = 0) that leave the state unchanged.

    Returns:
        As :func:`tfla.mlstm`.
    """
    B, H, S, Dk = q.shape
    Dv = v.shape[-1]
    L = chunk_size
    blq, blkv, bk, bv = _blocks(L, Dk, Dv, block_lq, block_lkv, block_dqk, block_dv)
    if fp32_precision not in ("ieee", "tf32"):
        raise ValueError(f"fp32_precision: expected 'ieee' or 'tf32', got {fp32_precision!r}")
    stabilize = variant == "exp"
    dev = q.device
    lf = F.logsigmoid(f.float())
    li = i.float() if stabilize else F.logsigmoid(i.float())
    Sp = -(-S // L) * L
    if Sp != S:
        pad = Sp - S
        q = F.pad(q, (0, 0, 0, pad))
        k = F.pad(k, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
        lf = F.pad(lf, (0, pad), value=0.0)
        li = F.pad(li, (0, pad), value=float("-inf"))
    c0 = torch.zeros(B, H, Dk, Dv, device=dev) if c0 is None else c0.float()
    n0 = torch.zeros(B, H, Dk, device=dev) if n0 is None else n0.float()
    m0 = torch.zeros(B, H, 1, device=dev) if (m0 is None or not stabilize) else m0.float()
    lowp = q.dtype in (torch.bfloat16, torch.float16) and not triton_interpret()
    if q.dtype == torch.float64:
        raise TypeError(
            "q: the Triton kernels take float32/bfloat16/float16 inputs, got float64 (use backend='torch')"
        )
    cfg = (
        L,
        blq,
        blkv,
        bk,
        bv,
        stabilize,
        normalize,
        float(eps),
        bool(detach_denominator),
        lowp,
        fp32_precision,
        1.0 / math.sqrt(Dk) if qk_scale is None else float(qk_scale),
    )
    h, C, n, m = _TFLAFunction.apply(q, k, v, lf, li, c0, n0, m0, cfg)
    h = h[:, :, :S]
    if return_last_state:
        if not stabilize:
            m = torch.zeros_like(m)
        return h, (C, n, m)
    return h
