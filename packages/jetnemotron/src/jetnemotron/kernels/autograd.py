"""Launchers and autograd functions of the Triton kernels (imports triton).

The gated-delta-rule backward recomputes through the torch chunked path (autograd), as the issue
allows for a first version; the dynamic-conv backward is two Triton kernels.
"""

from __future__ import annotations

import math

import torch
import triton

from jetnemotron.chunked import gated_delta_rule_chunked
from jetnemotron.kernels.gdr_kernels import (
    _dconv_bwd_dk_kernel,
    _dconv_bwd_dx_kernel,
    _dconv_fwd_kernel,
    _gdr_intra_kernel,
    _gdr_output_kernel,
    _gdr_state_kernel,
)
from jetnemotron.reference import l2norm
from neurips25_core.device import kernel_buffer

__all__ = ["dynamic_conv_triton", "gated_delta_rule_triton"]


def _buffer(*shape: int, device) -> torch.Tensor:
    """A float32 buffer the kernels fill (NaN-poisoned under the interpreter: core's kernel_buffer)."""
    return kernel_buffer(*shape, dtype=torch.float32, device=device)


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def _precision(dtype: torch.dtype) -> str:
    # Exact float32 products for float32/float64 inputs; TF32 for half inputs on GPU.
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def gdr_forward(q, k, v, g, beta, scale, initial_state, use_qk_l2norm, chunk_size):
    """The Triton forward: returns ``(o [B, T, H, d_v] float32, S [B, H, d_k, d_v] float32)``."""
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    C = chunk_size
    NC = math.ceil(T / C)
    Tp = NC * C
    f32 = torch.float32
    q, k = q.to(f32), k.to(f32)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * scale

    def flat(x):  # [B, T, H, ...] -> [B·H, Tp, ...] contiguous float32, zero-padded
        x = x.to(f32).transpose(1, 2).reshape(B * H, T, *x.shape[3:])
        pad = [0, 0] * (x.dim() - 2) + [0, Tp - T]
        return torch.nn.functional.pad(x, pad).contiguous()

    qf, kf, vf, gf, bf = flat(q), flat(k), flat(v), flat(g), flat(beta)
    dev = q.device
    BK, BV = _pow2(dk), _pow2(dv)
    BVS = min(BV, 64)
    prec = _precision(v.dtype)
    gam = _buffer(B * H, Tp, device=dev)
    w = _buffer(B * H, Tp, dk, device=dev)
    u = _buffer(B * H, Tp, dv, device=dev)
    _gdr_intra_kernel[(NC, B * H)](
        kf, vf, gf, bf, gam, w, u, Tp, dk, dv, C=C, BK=BK, BV=BV, PREC=prec
    )
    states = _buffer(B * H, NC, dk, dv, device=dev)
    vp = _buffer(B * H, Tp, dv, device=dev)
    s_final = _buffer(B * H, dk, dv, device=dev)
    s0 = (
        initial_state.to(f32).reshape(B * H, dk, dv).contiguous()
        if initial_state is not None
        else s_final  # not read
    )
    _gdr_state_kernel[(B * H, triton.cdiv(dv, BVS))](
        kf, gam, w, u, s0, states, vp, s_final, Tp, dk, dv, NC,
        C=C, BK=BK, BV=BVS, HAS_S0=initial_state is not None, PREC=prec,
    )  # fmt: skip
    o = _buffer(B * H, Tp, dv, device=dev)
    _gdr_output_kernel[(NC, B * H, triton.cdiv(dv, BVS))](
        qf, kf, gam, states, vp, o, Tp, dk, dv, NC, C=C, BK=BK, BV=BVS, PREC=prec
    )
    o = o[:, :T].reshape(B, H, T, dv).transpose(1, 2)
    return o, s_final.reshape(B, H, dk, dv)


class _GatedDeltaRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, initial_state, scale, use_qk_l2norm, chunk_size):
        o, S = gdr_forward(q, k, v, g, beta, scale, initial_state, use_qk_l2norm, chunk_size)
        ctx.save_for_backward(q, k, v, g, beta, initial_state)
        ctx.args = (scale, use_qk_l2norm, chunk_size)
        return o.to(q.dtype), S

    @staticmethod
    def backward(ctx, do, dS):
        q, k, v, g, beta, s0 = ctx.saved_tensors
        scale, use_qk_l2norm, chunk_size = ctx.args
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in (q, k, v, g, beta)]
        s0_in = None if s0 is None else s0.detach().requires_grad_(s0.requires_grad)
        with torch.enable_grad():
            o, S = gated_delta_rule_chunked(
                *inputs,
                scale=scale,
                initial_state=s0_in,
                use_qk_l2norm=use_qk_l2norm,
                chunk_size=chunk_size,
            )
            wrt = [t for t in (*inputs, s0_in) if t is not None and t.requires_grad]
            outs, grads_out = [o], [do]
            if dS is not None:
                outs.append(S)
                grads_out.append(dS.to(S.dtype))
            grads = (
                iter(torch.autograd.grad(outs, wrt, grads_out, allow_unused=True))
                if wrt
                else iter(())
            )
        result = [
            next(grads) if t is not None and t.requires_grad else None for t in (*inputs, s0_in)
        ]
        return (*result, None, None, None)


def gated_delta_rule_triton(q, k, v, g, beta, *, scale, initial_state, use_qk_l2norm, chunk_size):
    """The gated delta rule with the Triton forward; arguments checked by ``ops.gated_delta_rule``."""
    o, S = _GatedDeltaRule.apply(q, k, v, g, beta, initial_state, scale, use_qk_l2norm, chunk_size)
    return o, (S.double() if q.dtype == torch.float64 else S)


def _dconv_tiles(T: int, D: int, W: int) -> tuple[int, int, int]:
    return (
        min(16, triton.next_power_of_2(T)),
        min(32, triton.next_power_of_2(D)),
        triton.next_power_of_2(W),
    )


class _DynamicConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, kernels, past, silu):
        B, T, D = x.shape
        W = kernels.shape[-1]
        f32 = torch.float32
        full = torch.cat([past.to(f32).transpose(1, 2), x.to(f32)], dim=1).contiguous()
        ker = kernels.to(f32).contiguous()
        y = _buffer(B, T, D, device=x.device)
        BT, BD, WP = _dconv_tiles(T, D, W)
        _dconv_fwd_kernel[(B, triton.cdiv(T, BT), triton.cdiv(D, BD))](
            full, ker, y, T, D, W, BT=BT, BD=BD, WP=WP, SILU=silu
        )
        ctx.save_for_backward(full, ker)
        ctx.silu = silu
        ctx.dtypes = (x.dtype, kernels.dtype, past.dtype)
        return y.to(x.dtype), full[:, -W:].transpose(1, 2).to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy, dcache):
        full, ker = ctx.saved_tensors
        B, T, D, W = ker.shape
        BT, BD, WP = _dconv_tiles(T, D, W)
        dy = dy.to(torch.float32).contiguous()
        dz = _buffer(*dy.shape, device=dy.device)
        dker = _buffer(*ker.shape, device=ker.device)
        _dconv_bwd_dk_kernel[(B, triton.cdiv(T, BT), triton.cdiv(D, BD))](
            full, ker, dy, dz, dker, T, D, W, BT=BT, BD=BD, WP=WP, SILU=ctx.silu
        )
        dfull = _buffer(*full.shape, device=full.device)
        _dconv_bwd_dx_kernel[(B, triton.cdiv(W + T, BT), triton.cdiv(D, BD))](
            dz, ker, dfull, T, D, W, BT=BT, BD=BD, WP=WP
        )
        if dcache is not None:  # the returned cache is the last W rows of FULL
            dfull[:, -W:] += dcache.transpose(1, 2).to(torch.float32)
        xd, kd, pd = ctx.dtypes
        return dfull[:, W:].to(xd), dker.to(kd), dfull[:, :W].transpose(1, 2).to(pd), None


def dynamic_conv_triton(x, kernels, past, activation):
    """Dynamic conv with Triton forward and backward; arguments checked by ``ops.dynamic_conv``."""
    return _DynamicConv.apply(x, kernels, past, activation == "silu")
