"""Allocation: closed form (KKT, scipy.minimize), MILP/DP vs brute force, bad budgets."""

import itertools

import numpy as np
import pytest
import torch
from qpalette.allocation import (
    estimate_sensitivities,
    gaussian_error_table,
    optimal_fractional_bits,
    proxy_latency,
    solve_latency_msq,
    solve_memory_msq,
)
from qpalette.quantizers import parse_spec, storage_bytes
from scipy.optimize import minimize


def test_closed_form_meets_kkt_and_matches_minimize():
    rng = np.random.default_rng(0)
    a = rng.lognormal(0, 2, 6)
    n = rng.integers(1, 5, 6).astype(float) * 100
    M = 2.5 * n.sum()
    b = optimal_fractional_bits(a, n, M, eta=1.5)
    assert abs((n * b).sum() - M) < 1e-6 * M
    # KKT: a_l 2^(-2 b_l) ln(4) / n_l = λ on free layers, <= λ on clamped ones
    g = a * 2.0 ** (-2 * b) * np.log(4) / n
    free = b > 1.5 + 1e-9
    lam = g[free].mean()
    assert np.allclose(g[free], lam, rtol=1e-6)
    assert np.all(g[~free] <= lam * (1 + 1e-6))
    res = minimize(
        lambda x: (a * 2.0 ** (-2 * x)).sum(),
        np.full(6, 2.5),
        constraints=[{"type": "eq", "fun": lambda x: (n * x).sum() - M}],
        bounds=[(1.5, None)] * 6,
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    assert np.allclose(res.x, b, atol=1e-3)
    with pytest.raises(ValueError, match="M"):
        optimal_fractional_bits(a, n, 1.0 * n.sum(), eta=1.5)


TABLE = {parse_spec(q): e for q, e in [("nuq-2", 0.1175), ("nuq-3", 0.0345), ("nuq-4", 0.0095)]}


def test_memory_milp_and_dp_match_brute_force():
    rng = np.random.default_rng(1)
    names = ["a", "b", "c", "d"]
    shapes = {"a": (32, 64), "b": (64, 64), "c": (32, 32), "d": (16, 64)}
    for trial in range(5):
        sens = dict(zip(names, rng.lognormal(0, 1.5, 4)))
        bits = 2.3 + 0.4 * trial
        budget = bits * sum(r * c for r, c in shapes.values()) / 8
        best = None
        for combo in itertools.product(TABLE, repeat=4):
            mem = sum(storage_bytes(q, shapes[n], codebook=False) for q, n in zip(combo, names))
            if mem <= budget:
                obj = sum(sens[n] * TABLE[q] for q, n in zip(combo, names))
                best = obj if best is None else min(best, obj)
        for method in ("milp", "dp"):
            assign, _ = solve_memory_msq(sens, shapes, bits, TABLE, method=method)
            obj = sum(sens[n] * TABLE[assign[n]] for n in names)
            assert abs(obj - best) < 1e-9, (method, trial)
            assert sum(storage_bytes(assign[n], shapes[n], False) for n in names) <= budget
    with pytest.raises(ValueError, match="infeasible"):
        solve_memory_msq(sens, shapes, 1.5, TABLE)
    with pytest.raises(ValueError, match="method"):
        solve_memory_msq(sens, shapes, 3, TABLE, method="greedy")


def _partitions():
    qkv = [[("q",), ("k",), ("v",)], [("q", "k"), ("v",)], [("k", "v"), ("q",)],
           [("q", "v"), ("k",)], [("q", "k", "v")]]  # fmt: skip
    gu = [[("gate",), ("up",)], [("gate", "up")]]
    for a in qkv:
        for b in gu:
            yield a + b + [("o",), ("down",)]


def test_latency_milp_matches_brute_force_with_fusion():
    rng = np.random.default_rng(2)
    roles = ["q", "k", "v", "o", "gate", "up", "down"]
    block = {r: f"l.{r}" for r in roles}
    shapes = {
        "l.q": (64, 64), "l.k": (32, 64), "l.v": (32, 64), "l.o": (64, 64),
        "l.gate": (128, 64), "l.up": (128, 64), "l.down": (64, 128),
    }  # fmt: skip
    sens = {n: float(x) for n, x in zip(block.values(), rng.lognormal(0, 1, 7))}
    unfused = sum(proxy_latency(parse_spec("nuq-3"), s) for s in shapes.values())
    for budget in [unfused * 0.6, unfused * 0.8, unfused]:
        best = None
        for part in _partitions():
            for qs in itertools.product(TABLE, repeat=len(part)):
                lat, obj = 0.0, 0.0
                for g, q in zip(part, qs):
                    mem = [block[r] for r in g]
                    shape = (sum(shapes[m][0] for m in mem), 64 if g != ("down",) else 128)
                    lat += proxy_latency(q, shape)
                    obj += sum(sens[m] for m in mem) * TABLE[q]
                if lat <= budget:
                    best = obj if best is None else min(best, obj)
        assign, groups = solve_latency_msq(sens, shapes, [block], TABLE, budget)
        obj = sum(sens[n] * TABLE[assign[n]] for n in block.values())
        assert abs(obj - best) < 1e-12
        for g in groups:
            assert len({assign[m] for m in g}) == 1
    with pytest.raises(ValueError, match="latency_budget"):
        solve_latency_msq(sens, shapes, [block], TABLE, 1e-6)


def test_error_table_is_monotone():
    t = gaussian_error_table(["nuq-2", "nuq-3", "tcq-2-L8", "tcq-2.5-L8"], rows=32, cols=256)
    v = list(t.values())
    assert v[0] > v[1] and v[2] > v[3] and v[2] < v[0]


def test_sensitivities_are_positive_and_validated():
    from neurips25_core.models import tiny_llama, tiny_llama_config

    m = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2)).eval()
    names = ["model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"]
    a = estimate_sensitivities(m, names, seq_len=32)
    assert all(v > 0 for v in a.values())
    w = m.model.layers[0].mlp.down_proj.weight.detach().clone()
    estimate_sensitivities(m, names[:1], seq_len=16)
    assert torch.equal(w, m.model.layers[0].mlp.down_proj.weight)  # restored
    with pytest.raises(ValueError, match="no module"):
        estimate_sensitivities(m, ["x"])
    with pytest.raises(ValueError, match="t"):
        estimate_sensitivities(m, names, t=2.0)
