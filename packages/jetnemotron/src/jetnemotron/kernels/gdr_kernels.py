"""Triton kernels of the chunked gated delta rule and of the dynamic (input-generated) conv.

Layout: the launcher (:mod:`jetnemotron.kernels.autograd`) normalises and scales q, k in torch,
flattens batch and heads to ``BH`` and pads the sequence to ``NC·C`` tokens with ``g = β = 0``
(which leaves the state untouched); every tensor is contiguous float32. Head dims are padded to
powers of two >= 16 inside the kernels by masking (``BK``, ``BV``), as ``tl.dot`` needs.

Gated delta rule, three kernels (pointer arithmetic and masks only, no block pointers):

* ``_gdr_intra_kernel`` grid (NC, BH): per chunk, γ = cumsum(g), the strictly lower
  ``A = β (K Kᵀ) ⊙ Γ`` with Γ masked *before* ``exp`` (only γ_i − γ_j <= 0), ``(I + A)⁻¹`` by
  row-wise forward substitution in registers, then ``W = (I + A)⁻¹(β e^γ K)`` and
  ``U = (I + A)⁻¹(β V)``.
* ``_gdr_state_kernel`` grid (BH, cdiv(d_v, BV)): the recurrence over chunks,
  ``V′ = U − W S`` and ``S ← e^{γ_C} S + (K e^{γ_C − γ})ᵀ V′``; stores the state entering
  every chunk and V′.
* ``_gdr_output_kernel`` grid (NC, BH, cdiv(d_v, BV)):
  ``O = (Q e^γ) S + (Q Kᵀ ⊙ Γ ⊙ tril) V′``.

Dynamic conv (``FULL`` is ``[cache ; x]``, B × (W + T) × D; tap w of token t reads row
``t + 1 + w``; W is padded to the power of two ``WP`` with a mask):

* ``_dconv_fwd_kernel`` grid (B, cdiv(T, BT), cdiv(D, BD)): ``y = act(Σ_w K[t, c, w]·FULL[t+1+w, c])``.
* ``_dconv_bwd_dk_kernel`` (same grid): ``dz = dy·act′(z)``, ``dK[t, c, w] = dz[t, c]·FULL[t+1+w, c]``.
* ``_dconv_bwd_dx_kernel`` grid (B, cdiv(W + T, BT), cdiv(D, BD)):
  ``dFULL[τ, c] = Σ_w dz[τ−1−w, c]·K[τ−1−w, c, w]``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _gdr_intra_kernel(
    K, V, G, BETA, GAM, WOUT, UOUT,
    Tp, DK, DV,
    C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    oc = n * C + tl.arange(0, C)
    ok = tl.arange(0, BK)
    ov = tl.arange(0, BV)
    mk = ok < DK
    mv = ov < DV
    k = tl.load(K + bh * Tp * DK + oc[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0)
    v = tl.load(V + bh * Tp * DV + oc[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0)
    g = tl.load(G + bh * Tp + oc)
    beta = tl.load(BETA + bh * Tp + oc)
    gam = tl.cumsum(g, axis=0)
    rows = tl.arange(0, C)
    lower = rows[:, None] > rows[None, :]
    diff = tl.where(lower, gam[:, None] - gam[None, :], float("-inf"))  # mask, then exp
    A = tl.dot(k, tl.trans(k), input_precision=PREC) * tl.exp(diff) * beta[:, None]
    A = tl.where(lower, A, 0.0)
    # (I + A)⁻¹ by forward substitution: row i = e_i − Σ_{j<i} A_ij · row j.
    X = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)
    for i in range(1, C):
        a_i = tl.sum(tl.where(rows[:, None] == i, A, 0.0), axis=0)  # row i of A (zeros for j >= i)
        new = tl.where(rows == i, 1.0, 0.0) - tl.sum(a_i[:, None] * X, axis=0)
        X = tl.where(rows[:, None] == i, new[None, :], X)
    kw = k * (beta * tl.exp(gam))[:, None]
    vw = v * beta[:, None]
    w = tl.dot(X, kw, input_precision=PREC)
    u = tl.dot(X, vw, input_precision=PREC)
    tl.store(GAM + bh * Tp + oc, gam)
    tl.store(WOUT + bh * Tp * DK + oc[:, None] * DK + ok[None, :], w, mask=mk[None, :])
    tl.store(UOUT + bh * Tp * DV + oc[:, None] * DV + ov[None, :], u, mask=mv[None, :])


@triton.jit
def _gdr_state_kernel(
    K, GAM, WIN, UIN, S0, STATES, VP, SFINAL,
    Tp, DK, DV, NC,
    C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_S0: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0).to(tl.int64)
    pv = tl.program_id(1)
    ok = tl.arange(0, BK)
    ov = pv * BV + tl.arange(0, BV)
    mk = ok < DK
    mv = ov < DV
    mkv = mk[:, None] & mv[None, :]
    s_off = ok[:, None] * DV + ov[None, :]
    if HAS_S0:
        S = tl.load(S0 + bh * DK * DV + s_off, mask=mkv, other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    for n in range(0, NC):
        tl.store(STATES + (bh * NC + n) * DK * DV + s_off, S, mask=mkv)
        oc = n * C + tl.arange(0, C)
        w = tl.load(
            WIN + bh * Tp * DK + oc[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0
        )
        u = tl.load(
            UIN + bh * Tp * DV + oc[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0
        )
        vp = u - tl.dot(w, S, input_precision=PREC)
        tl.store(VP + bh * Tp * DV + oc[:, None] * DV + ov[None, :], vp, mask=mv[None, :])
        gam = tl.load(GAM + bh * Tp + oc)
        last = tl.load(GAM + bh * Tp + n * C + C - 1)
        k = tl.load(K + bh * Tp * DK + oc[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0)
        kd = k * tl.exp(last - gam)[:, None]  # e^{γ_C − γ_j} <= 1
        S = tl.exp(last) * S + tl.dot(tl.trans(kd), vp, input_precision=PREC)
    tl.store(SFINAL + bh * DK * DV + s_off, S, mask=mkv)


@triton.jit
def _gdr_output_kernel(
    Q, K, GAM, STATES, VP, OUT,
    Tp, DK, DV, NC,
    C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    pv = tl.program_id(2)
    oc = n * C + tl.arange(0, C)
    ok = tl.arange(0, BK)
    ov = pv * BV + tl.arange(0, BV)
    mk = ok < DK
    mv = ov < DV
    q = tl.load(Q + bh * Tp * DK + oc[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0)
    k = tl.load(K + bh * Tp * DK + oc[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0)
    gam = tl.load(GAM + bh * Tp + oc)
    S = tl.load(
        STATES + (bh * NC + n) * DK * DV + ok[:, None] * DV + ov[None, :],
        mask=mk[:, None] & mv[None, :],
        other=0.0,
    )
    vp = tl.load(VP + bh * Tp * DV + oc[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0)
    rows = tl.arange(0, C)
    causal = rows[:, None] >= rows[None, :]
    Gamma = tl.exp(tl.where(causal, gam[:, None] - gam[None, :], float("-inf")))
    P = tl.dot(q, tl.trans(k), input_precision=PREC) * Gamma
    o = tl.dot(q * tl.exp(gam)[:, None], S, input_precision=PREC)
    o += tl.dot(P, vp, input_precision=PREC)
    tl.store(OUT + bh * Tp * DV + oc[:, None] * DV + ov[None, :], o, mask=mv[None, :])


@triton.jit
def _silu_and_grad(z):
    s = 1.0 / (1.0 + tl.exp(-z))
    return z * s, s * (1.0 + z * (1.0 - s))


@triton.jit
def _dconv_fwd_kernel(
    FULL, KER, Y,
    T, D, W,
    BT: tl.constexpr, BD: tl.constexpr, WP: tl.constexpr, SILU: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    ot = tl.program_id(1) * BT + tl.arange(0, BT)
    od = tl.program_id(2) * BD + tl.arange(0, BD)
    ow = tl.arange(0, WP)
    m2 = (ot < T)[:, None] & (od < D)[None, :]
    m3 = m2[:, :, None] & (ow < W)[None, None, :]
    rows = ot[:, None, None] + 1 + ow[None, None, :]
    xw = tl.load(FULL + b * (W + T) * D + rows * D + od[None, :, None], mask=m3, other=0.0)
    kw = tl.load(
        KER + b * T * D * W + (ot[:, None, None] * D + od[None, :, None]) * W + ow[None, None, :],
        mask=m3,
        other=0.0,
    )
    z = tl.sum(xw.to(tl.float32) * kw.to(tl.float32), axis=2)
    if SILU:
        z, _ = _silu_and_grad(z)
    tl.store(Y + b * T * D + ot[:, None] * D + od[None, :], z, mask=m2)


@triton.jit
def _dconv_bwd_dk_kernel(
    FULL, KER, DY, DZ, DK,
    T, D, W,
    BT: tl.constexpr, BD: tl.constexpr, WP: tl.constexpr, SILU: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    ot = tl.program_id(1) * BT + tl.arange(0, BT)
    od = tl.program_id(2) * BD + tl.arange(0, BD)
    ow = tl.arange(0, WP)
    m2 = (ot < T)[:, None] & (od < D)[None, :]
    m3 = m2[:, :, None] & (ow < W)[None, None, :]
    rows = ot[:, None, None] + 1 + ow[None, None, :]
    xw = tl.load(FULL + b * (W + T) * D + rows * D + od[None, :, None], mask=m3, other=0.0)
    k_off = (ot[:, None, None] * D + od[None, :, None]) * W + ow[None, None, :]
    kw = tl.load(KER + b * T * D * W + k_off, mask=m3, other=0.0)
    dz = tl.load(DY + b * T * D + ot[:, None] * D + od[None, :], mask=m2, other=0.0)
    if SILU:
        z = tl.sum(xw * kw, axis=2)
        _, dsilu = _silu_and_grad(z)
        dz = dz * dsilu
    tl.store(DZ + b * T * D + ot[:, None] * D + od[None, :], dz, mask=m2)
    tl.store(DK + b * T * D * W + k_off, dz[:, :, None] * xw, mask=m3)


@triton.jit
def _dconv_bwd_dx_kernel(
    DZ, KER, DFULL,
    T, D, W,
    BT: tl.constexpr, BD: tl.constexpr, WP: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    orow = tl.program_id(1) * BT + tl.arange(0, BT)  # rows of FULL, 0 … W + T − 1
    od = tl.program_id(2) * BD + tl.arange(0, BD)
    ow = tl.arange(0, WP)
    md = od < D
    t = orow[:, None, None] - 1 - ow[None, None, :]  # the token whose tap w read this row
    m3 = (t >= 0) & (t < T) & md[None, :, None] & (ow < W)[None, None, :]
    dz = tl.load(DZ + b * T * D + t * D + od[None, :, None], mask=m3, other=0.0)
    kw = tl.load(
        KER + b * T * D * W + (t * D + od[None, :, None]) * W + ow[None, None, :],
        mask=m3,
        other=0.0,
    )
    dx = tl.sum(dz * kw, axis=2)
    m2 = (orow < W + T)[:, None] & md[None, :]
    tl.store(DFULL + b * (W + T) * D + orow[:, None] * D + od[None, :], dx, mask=m2)
