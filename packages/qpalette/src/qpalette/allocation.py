"""Bit allocation: the closed-form optimum, the Gaussian error table, sensitivities, MSQ solvers.

With ΔL ≈ Σ_l a_l·e_l (linearity theorem) and a per-quantizer normalised error e(q) that does not
depend on the layer (rotated rows are near Gaussian), mixed-scheme quantization is a 0/1 program:
pick one quantizer per layer (memory MSQ) or one (fused group, quantizer) cover per block (latency
MSQ) to minimise Σ a_l·e(q_l) under the budget. Solved with ``scipy.optimize.milp`` (HiGHS);
memory MSQ also has an exact dynamic program.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from .quantizers import QuantizerSpec, parse_spec, quantize, storage_bytes

__all__ = [
    "BLOCK_GROUPS",
    "estimate_sensitivities",
    "gaussian_error_table",
    "optimal_fractional_bits",
    "proxy_latency",
    "solve_latency_msq",
    "solve_memory_msq",
]

#: Fusion groups per decoder block (official ``solve_lat_const.py``).
BLOCK_GROUPS: tuple[tuple[str, ...], ...] = (
    ("q",),
    ("k",),
    ("v",),
    ("o",),
    ("gate",),
    ("up",),
    ("down",),
    ("q", "k"),
    ("k", "v"),
    ("q", "v"),
    ("q", "k", "v"),
    ("gate", "up"),
)


def optimal_fractional_bits(
    a: Sequence[float], n: Sequence[float], M: float, eta: float = 1.0, iters: int = 200
) -> np.ndarray:
    """Minimise Σ a_l 2^(-2 b_l) subject to Σ n_l b_l = M, b_l >= η (ideal Gaussian quantizers).

    b_l* = max(η, ½ log2(a_l / n_l) + C), with C found by bisection.

    Args:
        a: (layers,) positive sensitivities.
        n: (layers,) weights per layer.
        M: total bit budget (bits).
        eta: the lowest supported rate.

    Returns:
        (layers,) float64 optimal bits.

    Example:
        >>> optimal_fractional_bits([1.0, 4.0], [1, 1], 6.0).round(3).tolist()
        [2.5, 3.5]
    """
    a = np.asarray(a, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if a.shape != n.shape or a.ndim != 1:
        raise ValueError(f"a, n: expected equal 1-D shapes, got {a.shape} and {n.shape}")
    if np.any(a <= 0) or np.any(n <= 0):
        raise ValueError("a, n: expected positive sensitivities and sizes")
    if eta * n.sum() - 1e-9 > M:
        raise ValueError(f"M: budget {M} bits is below the minimum η·Σn = {eta * n.sum()}")
    base = 0.5 * np.log2(a / n)

    def bits(c):
        return np.maximum(eta, base + c)

    lo, hi = eta - base.max() - 1.0, eta - base.min() + M / n.sum() + 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if (n * bits(mid)).sum() > M:
            hi = mid
        else:
            lo = mid
    return bits(0.5 * (lo + hi))


@functools.cache
def _gaussian_error(spec: QuantizerSpec, rows: int, cols: int, seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    d = quantize(w, spec).dequantize().double()
    return float((d - w).square().sum() / w.square().sum())


def gaussian_error_table(
    palette: Sequence[QuantizerSpec | str], rows: int = 128, cols: int = 256, seed: int = 0
) -> dict[QuantizerSpec, float]:
    """Normalised error ‖Q(W) - W‖²/‖W‖² of each quantizer on an i.i.d. N(0, 1) matrix.

    Example:
        >>> t = gaussian_error_table(["nuq-2", "nuq-3"], rows=32, cols=64)
        >>> [round(v, 2) for v in t.values()]
        [0.12, 0.03]
    """
    return {parse_spec(q): _gaussian_error(parse_spec(q), rows, cols, seed) for q in palette}


def _kl(logits_ref: torch.Tensor, logits: torch.Tensor) -> float:
    lp = torch.log_softmax(logits_ref.double(), -1)
    lq = torch.log_softmax(logits.double(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


@torch.no_grad()
def model_kl(model: nn.Module, ref_logits: torch.Tensor, tokens: torch.Tensor) -> float:
    """Mean per-token KL(p_ref ‖ p_model) on ``tokens``."""
    out = model(tokens)
    return _kl(ref_logits, getattr(out, "logits", out))


@torch.no_grad()
def estimate_sensitivities(
    model: nn.Module,
    names: Sequence[str],
    tokens: torch.Tensor | None = None,
    t: float = 0.01,
    seeds: Sequence[int] = (0, 1),
    batch_size: int = 4,
    seq_len: int = 128,
) -> dict[str, float]:
    """Data-free sensitivities a_l = ΔKL / t for W_l + √t·RMS(W_l)·ε (mean over seeds).

    The perturbation has normalised error t, so a_l is the slope of the linearity theorem
    ΔKL ≈ a_l·e_l. KL is measured against the unperturbed model on ``tokens`` (default: random
    ids from the model's vocabulary).

    Args:
        model: a model whose output is logits or has ``.logits``.
        names: names of its nn.Linear modules.
        tokens: (batch, seq) int64 token ids, or None for random ones.
        t: normalised perturbation size.
        seeds: noise seeds (and the random-token seed is seeds[0]).
    """
    if not 0 < t < 1:
        raise ValueError(f"t: expected 0 < t < 1, got {t}")
    modules = dict(model.named_modules())
    for name in names:
        if name not in modules:
            raise ValueError(f"names: the model has no module {name!r}")
        if not isinstance(modules[name], nn.Linear):
            raise TypeError(f"names: {name!r} is a {type(modules[name]).__name__}, not nn.Linear")
    if tokens is None:
        vocab = model.config.vocab_size if hasattr(model, "config") else 256
        g = torch.Generator().manual_seed(int(seeds[0]))
        tokens = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    out = model(tokens)
    ref = getattr(out, "logits", out)
    result = {}
    for i, name in enumerate(names):
        w = modules[name].weight
        orig = w.detach().clone()
        rms = float(orig.double().square().mean().sqrt())
        vals = []
        for s in seeds:
            g = torch.Generator().manual_seed(1_000 * int(s) + i)
            noise = torch.randn(orig.shape, generator=g, dtype=orig.dtype)
            w.copy_(orig + math.sqrt(t) * rms * noise)
            vals.append(model_kl(model, ref, tokens) / t)
        w.copy_(orig)
        result[name] = max(float(np.mean(vals)), 1e-12)
    return result


def _options(palette, shapes, errors):
    palette = [parse_spec(q) for q in palette]
    missing = [q.name for q in palette if q not in errors]
    if missing:
        raise ValueError(f"error_table: no entry for {missing}")
    return palette


def solve_memory_msq(
    sensitivities: Mapping[str, float],
    shapes: Mapping[str, tuple[int, int]],
    bits: float,
    error_table: Mapping[QuantizerSpec, float],
    palette: Sequence[QuantizerSpec | str] | None = None,
    method: str = "milp",
    families: Sequence[Sequence[str]] = (),
) -> tuple[dict[str, QuantizerSpec], list[tuple[str, ...]]]:
    """Memory MSQ: min Σ a_l e(q_l) s.t. Σ bytes(q_l) <= (bits/16)·(fp16 bytes).

    bytes(q) = the codes (codebooks are shared data-free constants, stored once per model; row
    scales and signs are reported separately, as in the official accounting). ``method="dp"`` solves it exactly by dynamic programming over bytes.

    Args:
        sensitivities: name -> a_l.
        shapes: name -> (d_out, d_in).
        bits: average bits per weight budget b̄.
        error_table: spec -> normalised error (:func:`gaussian_error_table`).
        palette: the candidate quantizers (default: every key of ``error_table``).
        method: ``"milp"`` or ``"dp"``.
        families: same-input layer sets (e.g. q/k/v); members that got the same quantizer are
            returned as fused groups (free).

    Returns:
        (assignment name -> spec, groups).
    """
    names = list(sensitivities)
    if set(names) != set(shapes):
        raise ValueError("shapes: expected the same names as sensitivities")
    palette = _options(palette if palette is not None else list(error_table), shapes, error_table)
    valid = {}
    for name in names:
        opts = []
        for q in palette:
            try:
                opts.append((q, storage_bytes(q, shapes[name], codebook=False)))
            except ValueError:
                continue  # the shape does not fit this quantizer (e.g. half-TCQ on d_in/2 % 16)
        if not opts:
            raise ValueError(f"palette: no quantizer fits {name!r} of shape {shapes[name]}")
        valid[name] = opts
    budget = bits * sum(shapes[n][0] * shapes[n][1] for n in names) / 8
    least = sum(min(b for _, b in valid[n]) for n in names)
    if least > budget + 1e-9:
        raise ValueError(
            f"bits: budget {bits} bits/weight ({budget:.0f} bytes) is infeasible; the smallest "
            f"palette choice needs {least} bytes ({8 * least / (8 * budget / bits):.3f} bits/weight)"
        )
    if method == "dp":
        choice = _memory_dp(names, valid, sensitivities, error_table, budget)
    elif method == "milp":
        choice = _memory_milp(names, valid, sensitivities, error_table, budget)
    else:
        raise ValueError(f"method: expected 'milp' or 'dp', got {method!r}")
    groups = [tuple(f) for f in families if len(f) > 1 and len({choice[m] for m in f}) == 1]
    return choice, groups


def _memory_milp(names, valid, a, errors, budget):
    from scipy.optimize import Bounds, LinearConstraint, milp

    cols = [(n, q, b) for n in names for q, b in valid[n]]
    c = np.array([a[n] * errors[q] for n, q, _ in cols])
    one = np.zeros((len(names), len(cols)))
    for j, (n, _, _) in enumerate(cols):
        one[names.index(n), j] = 1
    mem = np.array([[b for _, _, b in cols]], dtype=np.float64)
    res = milp(
        c,
        constraints=[LinearConstraint(one, 1, 1), LinearConstraint(mem, -np.inf, budget)],
        integrality=np.ones(len(cols)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    if not res.success:
        raise ValueError(f"bits: the memory MSQ is infeasible ({res.message})")
    return {n: q for (n, q, _), x in zip(cols, res.x) if x > 0.5}


def _memory_dp(names, valid, a, errors, budget):
    costs = [b for n in names for _, b in valid[n]]
    unit = functools.reduce(math.gcd, costs)
    cap = int(budget // unit)
    inf = np.inf
    best = np.zeros(cap + 1)  # best[c]: min objective over layers so far with bytes <= c·unit
    picks = []
    for n in names:
        new = np.full(cap + 1, inf)
        arg = np.full(cap + 1, -1, dtype=np.int64)
        for k, (q, b) in enumerate(valid[n]):
            w = b // unit
            if w > cap:
                continue
            cand = np.full(cap + 1, inf)
            cand[w:] = best[: cap + 1 - w] + a[n] * errors[q]
            better = cand < new
            new[better], arg[better] = cand[better], k
        best = new
        picks.append(arg)
    if not np.isfinite(best[cap]):
        raise ValueError("bits: the memory MSQ is infeasible")
    choice, c = {}, cap
    for n, arg in zip(reversed(names), reversed(picks)):
        k = int(arg[c])
        q, b = valid[n][k]
        choice[n] = q
        c -= b // unit
    return choice


def proxy_latency(spec: QuantizerSpec, shape: tuple[int, int]) -> float:
    """GEMV latency proxy (seconds): 5 µs launch + stored bytes / (1 TB/s)."""
    return 5e-6 + (storage_bytes(spec, shape) + 2 * shape[0]) / 1e12


def solve_latency_msq(
    sensitivities: Mapping[str, float],
    shapes: Mapping[str, tuple[int, int]],
    blocks: Sequence[Mapping[str, str]],
    error_table: Mapping[QuantizerSpec, float],
    latency_budget: float,
    palette: Sequence[QuantizerSpec | str] | None = None,
    latency: Callable[
        [QuantizerSpec, tuple[int, int]], float | Mapping[str, float]
    ] = proxy_latency,
    c0: float = 0.0,
    memory_bits: float | None = None,
    groups: Sequence[tuple[str, ...]] = BLOCK_GROUPS,
) -> tuple[dict[str, QuantizerSpec], list[tuple[str, ...]]]:
    """Latency MSQ: per block, cover each projection once by a (fused group, quantizer) pair.

    min Σ x_{g,q} Σ_{p∈g} a_p e(q) s.t. c0 + Σ lat(g, q) x_{g,q} <= latency_budget
    (and optionally Σ bytes <= memory_bits·n/8). A fused group shares one quantizer and runs as
    one output-concatenated kernel of shape (Σ d_out, d_in). ``latency`` may return a dict of
    kernel variants (e.g. tensor-core and SIMT); the fastest is used (the official solver drops
    the SIMT ones by comparing the string ``"simt"`` with the integer 1).

    Args:
        blocks: per block, role -> module name (roles q, k, v, o, gate, up, down).
        latency_budget: seconds per token (1 / throughput).

    Returns:
        (assignment name -> spec, fused groups as tuples of names).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    palette = _options(palette if palette is not None else list(error_table), shapes, error_table)
    names = [n for b in blocks for n in b.values()]
    for n in names:
        if n not in sensitivities or n not in shapes:
            raise ValueError(f"blocks: {n!r} has no sensitivity or shape")
    cols = []  # (member names, spec, latency, bytes)
    for blk in blocks:
        for g in groups:
            if not all(r in blk for r in g):
                continue
            members = tuple(blk[r] for r in g)
            ins = {shapes[m][1] for m in members}
            if len(ins) != 1:
                continue
            shape = (sum(shapes[m][0] for m in members), ins.pop())
            for q in palette:
                try:
                    nbytes = storage_bytes(q, shape, codebook=False)
                except ValueError:
                    continue
                lat = latency(q, shape)
                if isinstance(lat, Mapping):
                    lat = min(float(v) for v in lat.values())
                cols.append((members, q, float(lat), nbytes))
    c = np.array([sum(sensitivities[m] * error_table[q] for m in mem) for mem, q, _, _ in cols])
    cover = np.zeros((len(names), len(cols)))
    for j, (mem, _, _, _) in enumerate(cols):
        for m in mem:
            cover[names.index(m), j] = 1
    cons = [
        LinearConstraint(cover, 1, 1),
        LinearConstraint(np.array([[lat for _, _, lat, _ in cols]]), -np.inf, latency_budget - c0),
    ]
    if memory_bits is not None:
        budget = memory_bits * sum(shapes[n][0] * shapes[n][1] for n in names) / 8
        cons.append(LinearConstraint(np.array([[b for *_, b in cols]], float), -np.inf, budget))
    res = milp(
        c,
        constraints=cons,
        integrality=np.ones(len(cols)),
        bounds=Bounds(0, 1),
        options={"mip_rel_gap": 0.0},
    )
    if not res.success:
        raise ValueError(
            f"latency_budget: {latency_budget * 1e6:.1f} µs is infeasible for this palette "
            f"({res.message})"
        )
    assignment, fused = {}, []
    for (mem, q, _, _), x in zip(cols, res.x):
        if x > 0.5:
            for m in mem:
                assignment[m] = q
            if len(mem) > 1:
                fused.append(mem)
    return assignment, fused
