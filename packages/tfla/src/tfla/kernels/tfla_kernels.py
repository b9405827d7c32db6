"""Triton TFLA kernels for the chunkwise mLSTM (mLSTMexp and mLSTMsig), forward and backward.

Layout: every tensor is contiguous with the batch and head dims flattened to ``BH``; the sequence
is padded to ``S = NC·L`` (chunks of length ``L``). Gate inputs are float32: ``Bc`` holds the
in-chunk cumulative log forget gates ``b_t`` (BH, S), ``LI`` the log input weights ĩ_t (BH, S).
States are float32 and stored at every chunk boundary: ``Cs`` (BH, NC+1, DK, DV), ``Ns``
(BH, NC+1, DK), ``Ms`` (BH, NC+1); entry ``c`` is the state entering chunk ``c`` and entry ``NC``
is the last state.

Kernels (pointer arithmetic and masks only; Triton 3.9 has no block pointers):

* ``_fw_state_kernel``  grid (DK/BK, DV/BV, BH): the inter-chunk recurrence over chunks.
* ``_fw_intra_kernel``  grid (DV/BV, L/BLQ, NC·BH): TFLA's second level of sequence parallelism;
  one query tile per program, looping over key/value tiles up to the diagonal with an online max,
  then the inter-chunk term from the stored state once the max is final.
* ``_bw_state_kernel``  grid (DK/BK, DV/BV, BH): the reverse recurrence of the state gradients.
* ``_bw_dq_kernel``     grid (DK/BK, L/BLQ, NC·BH); ``_bw_dk_kernel`` grid (DK/BK, L/BLKV, NC·BH);
  ``_bw_dv_kernel``     grid (DV/BV, L/BLKV, NC·BH): tiled gradients of q, k and v.

The backward takes the gradients of the unnormalised numerator (``DNUM``, BH×S×DV) and of the
signed denominator (``DDEN``, BH×S) — the denominator is the numerator for a value column of ones,
so its gradient enters every kernel as ``dP_ts = DNUM_t·v_s + DDEN_t``. Gate gradients follow from
dq and dk by identities (see :mod:`tfla.kernels.autograd`). Accumulation is in float32; with
``LOWP`` the dot operands are cast to the input dtype (bf16/fp16 tensor cores on GPU).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _dot(a, b, LOWP: tl.constexpr, DT: tl.constexpr, PREC: tl.constexpr):
    if LOWP:
        return tl.dot(a.to(DT), b.to(DT))
    return tl.dot(a, b, input_precision=PREC)


@triton.jit
def _fw_state_kernel(
    K, V, Bc, LI, Cs, Ns, Ms,
    S, DK, DV, NC,
    L: tl.constexpr, BL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_k = tl.program_id(0)
    pid_v = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    DT = K.dtype.element_ty
    ok = pid_k * BK + tl.arange(0, BK)
    ov = pid_v * BV + tl.arange(0, BV)
    mk = ok < DK
    mv = ov < DV
    mkv = mk[:, None] & mv[None, :]
    c_off = ok[:, None] * DV + ov[None, :]
    # The initial state sits at entry 0 (written by the launcher).
    C = tl.load(Cs + bh * (NC + 1) * DK * DV + c_off, mask=mkv, other=0.0)
    n = tl.load(Ns + bh * (NC + 1) * DK + ok, mask=mk, other=0.0)
    m = tl.load(Ms + bh * (NC + 1))
    for c in range(0, NC):
        g = tl.load(Bc + bh * S + c * L + L - 1)
        if STABILIZE:
            ol = c * L + tl.arange(0, L)
            a_all = g - tl.load(Bc + bh * S + ol) + tl.load(LI + bh * S + ol)
            m_new = tl.maximum(g + m, tl.max(a_all, axis=0))
        else:
            m_new = m
        decay = tl.exp(g + m - m_new)
        C = C * decay
        n = n * decay
        for j in range(0, L, BL):
            ot = c * L + j + tl.arange(0, BL)
            w = tl.exp(g - tl.load(Bc + bh * S + ot) + tl.load(LI + bh * S + ot) - m_new)
            kt = tl.load(
                K + bh * S * DK + ot[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0
            ).to(tl.float32)
            vt = tl.load(
                V + bh * S * DV + ot[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0
            ).to(tl.float32)
            kw = kt * w[:, None]
            C += _dot(tl.trans(kw), vt, LOWP, DT, PREC)
            n += tl.sum(kw, axis=0)
        m = m_new
        base = bh * (NC + 1) + c + 1
        tl.store(Cs + base * DK * DV + c_off, C, mask=mkv)
        if pid_v == 0:
            tl.store(Ns + base * DK + ok, n, mask=mk)
            if pid_k == 0:
                tl.store(Ms + base, m)


@triton.jit
def _fw_intra_kernel(
    Q, K, V, Bc, LI, Cs, Ns, Ms, HOUT, DEN, MCOMB,
    S, DK, DV, NC, scale, eps,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_v = tl.program_id(0)
    pid_q = tl.program_id(1)
    pid_cbh = tl.program_id(2)
    c = pid_cbh % NC
    bh = (pid_cbh // NC).to(tl.int64)
    DT = Q.dtype.element_ty
    oq = c * L + pid_q * BLQ + tl.arange(0, BLQ)
    ov = pid_v * BV + tl.arange(0, BV)
    mv = ov < DV
    bq = tl.load(Bc + bh * S + oq)
    state = bh * (NC + 1) + c
    m_prev = tl.load(Ms + state)
    if STABILIZE:  # noqa: SIM108 (constexpr branch)
        mr = bq + m_prev  # the inter-chunk term's exponent seeds the running max
    else:
        mr = tl.zeros([BLQ], dtype=tl.float32)
    acc = tl.zeros([BLQ, BV], dtype=tl.float32)
    den = tl.zeros([BLQ], dtype=tl.float32)
    n_kv = tl.cdiv((pid_q + 1) * BLQ, BLKV)
    for j in range(0, n_kv):
        os = c * L + j * BLKV + tl.arange(0, BLKV)
        sc = tl.zeros([BLQ, BLKV], dtype=tl.float32)
        for d in range(0, DK, BK):
            od = d + tl.arange(0, BK)
            md = od < DK
            qt = tl.load(
                Q + bh * S * DK + oq[:, None] * DK + od[None, :], mask=md[None, :], other=0.0
            ).to(tl.float32)
            kt = tl.load(
                K + bh * S * DK + os[:, None] * DK + od[None, :], mask=md[None, :], other=0.0
            ).to(tl.float32)
            sc += _dot(qt, tl.trans(kt), LOWP, DT, PREC)
        logd = bq[:, None] - tl.load(Bc + bh * S + os)[None, :] + tl.load(LI + bh * S + os)[None, :]
        logd = tl.where(oq[:, None] >= os[None, :], logd, float("-inf"))
        if STABILIZE:
            m_new = tl.maximum(mr, tl.max(logd, axis=1))
            alpha = tl.exp(mr - m_new)
            acc = acc * alpha[:, None]
            den = den * alpha
            mr = m_new
        p = sc * scale * tl.exp(logd - mr[:, None])
        vt = tl.load(
            V + bh * S * DV + os[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0
        ).to(tl.float32)
        acc += _dot(p, vt, LOWP, DT, PREC)
        den += tl.sum(p, axis=1)
    wq = tl.exp(bq + m_prev - mr) * scale
    for d in range(0, DK, BK):
        od = d + tl.arange(0, BK)
        md = od < DK
        qt = tl.load(
            Q + bh * S * DK + oq[:, None] * DK + od[None, :], mask=md[None, :], other=0.0
        ).to(tl.float32)
        qt = qt * wq[:, None]
        Ct = tl.load(
            Cs + state * DK * DV + od[:, None] * DV + ov[None, :],
            mask=md[:, None] & mv[None, :],
            other=0.0,
        )
        acc += _dot(qt, Ct, LOWP, DT, PREC)
        nt = tl.load(Ns + state * DK + od, mask=md, other=0.0)
        den += tl.sum(qt * nt[None, :], axis=1)
    if NORMALIZE:
        if STABILIZE:  # noqa: SIM108 (constexpr branch)
            clamp = tl.exp(-mr)
        else:
            clamp = tl.full([BLQ], 1.0, dtype=tl.float32)
        acc = acc / (tl.maximum(tl.abs(den), clamp) + eps)[:, None]
    tl.store(HOUT + bh * S * DV + oq[:, None] * DV + ov[None, :], acc, mask=mv[None, :])
    if pid_v == 0:
        tl.store(DEN + bh * S + oq, den)
        tl.store(MCOMB + bh * S + oq, mr)


@triton.jit
def _bw_state_kernel(
    Q, Bc, Ms, MCOMB, DNUM, DDEN, DCs, DNs,
    S, DK, DV, NC, scale,
    L: tl.constexpr, BL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_k = tl.program_id(0)
    pid_v = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    DT = Q.dtype.element_ty
    ok = pid_k * BK + tl.arange(0, BK)
    ov = pid_v * BV + tl.arange(0, BV)
    mk = ok < DK
    mv = ov < DV
    mkv = mk[:, None] & mv[None, :]
    c_off = ok[:, None] * DV + ov[None, :]
    # The upstream gradient of the last state sits at entry NC (written by the launcher).
    dC = tl.load(DCs + (bh * (NC + 1) + NC) * DK * DV + c_off, mask=mkv, other=0.0)
    dn = tl.load(DNs + (bh * (NC + 1) + NC) * DK + ok, mask=mk, other=0.0)
    for cc in range(0, NC):
        c = NC - 1 - cc
        g = tl.load(Bc + bh * S + c * L + L - 1)
        m_prev = tl.load(Ms + bh * (NC + 1) + c)
        m_cur = tl.load(Ms + bh * (NC + 1) + c + 1)
        decay = tl.exp(g + m_prev - m_cur)
        dC = dC * decay
        dn = dn * decay
        for j in range(0, L, BL):
            ot = c * L + j + tl.arange(0, BL)
            w = tl.exp(tl.load(Bc + bh * S + ot) + m_prev - tl.load(MCOMB + bh * S + ot)) * scale
            qt = tl.load(
                Q + bh * S * DK + ot[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0
            ).to(tl.float32)
            qt = qt * w[:, None]
            dnum = tl.load(
                DNUM + bh * S * DV + ot[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0
            )
            dC += _dot(tl.trans(qt), dnum, LOWP, DT, PREC)
            dden = tl.load(DDEN + bh * S + ot)
            dn += tl.sum(qt * dden[:, None], axis=0)
        base = bh * (NC + 1) + c
        tl.store(DCs + base * DK * DV + c_off, dC, mask=mkv)
        if pid_v == 0:
            tl.store(DNs + base * DK + ok, dn, mask=mk)


@triton.jit
def _bw_dq_kernel(
    K, V, Bc, LI, Cs, Ns, Ms, MCOMB, DNUM, DDEN, DQ,
    S, DK, DV, NC, scale,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    LOWP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_k = tl.program_id(0)
    pid_q = tl.program_id(1)
    pid_cbh = tl.program_id(2)
    c = pid_cbh % NC
    bh = (pid_cbh // NC).to(tl.int64)
    DT = K.dtype.element_ty
    oq = c * L + pid_q * BLQ + tl.arange(0, BLQ)
    ok = pid_k * BK + tl.arange(0, BK)
    mk = ok < DK
    bq = tl.load(Bc + bh * S + oq)
    mc = tl.load(MCOMB + bh * S + oq)
    dden = tl.load(DDEN + bh * S + oq)
    state = bh * (NC + 1) + c
    m_prev = tl.load(Ms + state)
    acc = tl.zeros([BLQ, BK], dtype=tl.float32)
    n_kv = tl.cdiv((pid_q + 1) * BLQ, BLKV)
    for j in range(0, n_kv):
        os = c * L + j * BLKV + tl.arange(0, BLKV)
        dp = tl.zeros([BLQ, BLKV], dtype=tl.float32)
        for e in range(0, DV, BV):
            oe = e + tl.arange(0, BV)
            me = oe < DV
            dnum = tl.load(
                DNUM + bh * S * DV + oq[:, None] * DV + oe[None, :], mask=me[None, :], other=0.0
            )
            vt = tl.load(
                V + bh * S * DV + os[:, None] * DV + oe[None, :], mask=me[None, :], other=0.0
            ).to(tl.float32)
            dp += _dot(dnum, tl.trans(vt), LOWP, DT, PREC)
        logd = bq[:, None] - tl.load(Bc + bh * S + os)[None, :] + tl.load(LI + bh * S + os)[None, :]
        logd = tl.where(oq[:, None] >= os[None, :], logd, float("-inf"))
        dp = (dp + dden[:, None]) * tl.exp(logd - mc[:, None])
        kt = tl.load(
            K + bh * S * DK + os[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0
        ).to(tl.float32)
        acc += _dot(dp, kt, LOWP, DT, PREC)
    wq = tl.exp(bq + m_prev - mc)
    inter = tl.zeros([BLQ, BK], dtype=tl.float32)
    for e in range(0, DV, BV):
        oe = e + tl.arange(0, BV)
        me = oe < DV
        dnum = tl.load(
            DNUM + bh * S * DV + oq[:, None] * DV + oe[None, :], mask=me[None, :], other=0.0
        )
        Ct = tl.load(
            Cs + state * DK * DV + ok[:, None] * DV + oe[None, :],
            mask=mk[:, None] & me[None, :],
            other=0.0,
        )
        inter += _dot(dnum, tl.trans(Ct), LOWP, DT, PREC)
    nt = tl.load(Ns + state * DK + ok, mask=mk, other=0.0)
    inter += dden[:, None] * nt[None, :]
    acc = (acc + inter * wq[:, None]) * scale
    tl.store(DQ + bh * S * DK + oq[:, None] * DK + ok[None, :], acc, mask=mk[None, :])


@triton.jit
def _bw_dk_kernel(
    Q, V, Bc, LI, Ms, MCOMB, DNUM, DDEN, DCs, DNs, DKOUT,
    S, DK, DV, NC, scale,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_k = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_cbh = tl.program_id(2)
    c = pid_cbh % NC
    bh = (pid_cbh // NC).to(tl.int64)
    DT = Q.dtype.element_ty
    os = c * L + pid_s * BLKV + tl.arange(0, BLKV)
    ok = pid_k * BK + tl.arange(0, BK)
    mk = ok < DK
    bs = tl.load(Bc + bh * S + os)
    ls = tl.load(LI + bh * S + os)
    acc = tl.zeros([BLKV, BK], dtype=tl.float32)
    for jq in range((pid_s * BLKV) // BLQ, L // BLQ):
        oq = c * L + jq * BLQ + tl.arange(0, BLQ)
        dpt = tl.zeros([BLKV, BLQ], dtype=tl.float32)
        for e in range(0, DV, BV):
            oe = e + tl.arange(0, BV)
            me = oe < DV
            vt = tl.load(
                V + bh * S * DV + os[:, None] * DV + oe[None, :], mask=me[None, :], other=0.0
            ).to(tl.float32)
            dnum = tl.load(
                DNUM + bh * S * DV + oq[:, None] * DV + oe[None, :], mask=me[None, :], other=0.0
            )
            dpt += _dot(vt, tl.trans(dnum), LOWP, DT, PREC)
        bq = tl.load(Bc + bh * S + oq)
        mc = tl.load(MCOMB + bh * S + oq)
        dden = tl.load(DDEN + bh * S + oq)
        logd = bq[None, :] - bs[:, None] + ls[:, None]
        logd = tl.where(oq[None, :] >= os[:, None], logd, float("-inf"))
        dpt = (dpt + dden[None, :]) * tl.exp(logd - mc[None, :])
        qt = tl.load(
            Q + bh * S * DK + oq[:, None] * DK + ok[None, :], mask=mk[None, :], other=0.0
        ).to(tl.float32)
        acc += _dot(dpt, qt, LOWP, DT, PREC)
    acc = acc * scale
    g = tl.load(Bc + bh * S + c * L + L - 1)
    nxt = bh * (NC + 1) + c + 1
    m_cur = tl.load(Ms + nxt)
    wa = tl.exp(g - bs + ls - m_cur)
    inter = tl.zeros([BLKV, BK], dtype=tl.float32)
    for e in range(0, DV, BV):
        oe = e + tl.arange(0, BV)
        me = oe < DV
        vt = tl.load(
            V + bh * S * DV + os[:, None] * DV + oe[None, :], mask=me[None, :], other=0.0
        ).to(tl.float32)
        dCt = tl.load(
            DCs + nxt * DK * DV + ok[:, None] * DV + oe[None, :],
            mask=mk[:, None] & me[None, :],
            other=0.0,
        )
        inter += _dot(vt, tl.trans(dCt), LOWP, DT, PREC)
    dnt = tl.load(DNs + nxt * DK + ok, mask=mk, other=0.0)
    acc += (inter + dnt[None, :]) * wa[:, None]
    tl.store(DKOUT + bh * S * DK + os[:, None] * DK + ok[None, :], acc, mask=mk[None, :])


@triton.jit
def _bw_dv_kernel(
    Q, K, Bc, LI, Ms, MCOMB, DNUM, DCs, DVOUT,
    S, DK, DV, NC, scale,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, LOWP: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    pid_v = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_cbh = tl.program_id(2)
    c = pid_cbh % NC
    bh = (pid_cbh // NC).to(tl.int64)
    DT = Q.dtype.element_ty
    os = c * L + pid_s * BLKV + tl.arange(0, BLKV)
    ov = pid_v * BV + tl.arange(0, BV)
    mv = ov < DV
    bs = tl.load(Bc + bh * S + os)
    ls = tl.load(LI + bh * S + os)
    acc = tl.zeros([BLKV, BV], dtype=tl.float32)
    for jq in range((pid_s * BLKV) // BLQ, L // BLQ):
        oq = c * L + jq * BLQ + tl.arange(0, BLQ)
        pt = tl.zeros([BLKV, BLQ], dtype=tl.float32)
        for d in range(0, DK, BK):
            od = d + tl.arange(0, BK)
            md = od < DK
            kt = tl.load(
                K + bh * S * DK + os[:, None] * DK + od[None, :], mask=md[None, :], other=0.0
            ).to(tl.float32)
            qt = tl.load(
                Q + bh * S * DK + oq[:, None] * DK + od[None, :], mask=md[None, :], other=0.0
            ).to(tl.float32)
            pt += _dot(kt, tl.trans(qt), LOWP, DT, PREC)
        bq = tl.load(Bc + bh * S + oq)
        mc = tl.load(MCOMB + bh * S + oq)
        logd = bq[None, :] - bs[:, None] + ls[:, None]
        logd = tl.where(oq[None, :] >= os[:, None], logd, float("-inf"))
        pt = pt * scale * tl.exp(logd - mc[None, :])
        dnum = tl.load(
            DNUM + bh * S * DV + oq[:, None] * DV + ov[None, :], mask=mv[None, :], other=0.0
        )
        acc += _dot(pt, dnum, LOWP, DT, PREC)
    g = tl.load(Bc + bh * S + c * L + L - 1)
    nxt = bh * (NC + 1) + c + 1
    m_cur = tl.load(Ms + nxt)
    wa = tl.exp(g - bs + ls - m_cur)
    inter = tl.zeros([BLKV, BV], dtype=tl.float32)
    for d in range(0, DK, BK):
        od = d + tl.arange(0, BK)
        md = od < DK
        kt = tl.load(
            K + bh * S * DK + os[:, None] * DK + od[None, :], mask=md[None, :], other=0.0
        ).to(tl.float32)
        dCt = tl.load(
            DCs + nxt * DK * DV + od[:, None] * DV + ov[None, :],
            mask=md[:, None] & mv[None, :],
            other=0.0,
        )
        inter += _dot(kt, dCt, LOWP, DT, PREC)
    acc += inter * wa[:, None]
    tl.store(DVOUT + bh * S * DV + os[:, None] * DV + ov[None, :], acc, mask=mv[None, :])
