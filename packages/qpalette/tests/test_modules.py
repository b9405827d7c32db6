"""QPaletteLinear, FusedGroup, quantize_llama and quantize_ on a tiny transformers Llama."""

import copy

import pytest
import torch
from qpalette import FusedGroup, QPaletteConfig, QPaletteLinear, quantize_, quantize_llama
from qpalette.integration import llama_blocks, llama_projections
from qpalette.rotation import random_signs

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close


def _llama(dtype=torch.float32):
    cfg = tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    return tiny_llama(cfg, seed=0).to(dtype).eval()


def test_unquantized_equals_linear_fp64():
    lin = torch.nn.Linear(48, 24).double()
    q = QPaletteLinear.from_linear(lin, None, random_signs(48, 1, torch.float64))
    x = torch.randn(5, 48, dtype=torch.float64)
    assert_close(q(x), lin(x), rtol=1e-10)


def test_quantized_linear_is_close_and_counts_bytes():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    q = QPaletteLinear.from_linear(lin, "nuq-4")
    x = torch.randn(8, 64)
    rel = float((q(x) - lin(x)).norm() / lin(x).norm())
    assert rel < 0.15
    assert q.nbytes == q.qweight.nbytes + 64 // 8
    with pytest.raises(TypeError, match="linear"):
        QPaletteLinear.from_linear(torch.nn.Conv1d(2, 2, 1), "nuq-4")
    with pytest.raises(ValueError, match="signs"):
        QPaletteLinear.from_linear(lin, "nuq-4", torch.ones(3))


def test_fused_equals_unfused_and_checks_codebooks():
    torch.manual_seed(0)
    lins = [torch.nn.Linear(32, n) for n in (32, 16, 16)]
    s = random_signs(32, 2)
    members = [QPaletteLinear.from_linear(m, "vq-2", s) for m in lins]
    g = FusedGroup(members)
    x = torch.randn(3, 5, 32)
    outs = [p(x) for p in g.proxies()]
    for o, m in zip(outs, members):
        assert_close(o, m(x), rtol=1e-6)
    # a second call with a new input recomputes (no stale cache)
    x2 = torch.randn(3, 5, 32)
    assert_close(g.proxies()[1](x2), members[1](x2), rtol=1e-6)
    other = QPaletteLinear.from_linear(lins[1], "nuq-2", s)
    with pytest.raises(ValueError, match="codebooks"):
        FusedGroup([members[0], other])
    with pytest.raises(ValueError, match="sign"):
        FusedGroup([members[0], QPaletteLinear.from_linear(lins[1], "vq-2", random_signs(32, 9))])


def test_quantize_llama_rotated_unquantized_is_exact_fp64():
    model = _llama(torch.float64)
    x = torch.randint(0, 256, (2, 16))
    ref = model(x).logits
    names = llama_projections(model)
    assert len(names) == 7
    fam = [n for n in names if n.endswith(("q_proj", "k_proj", "v_proj"))]
    quantize_llama(model, {n: None for n in names}, groups=[])
    assert_close(model(x).logits, ref, rtol=1e-10)
    # shared signs within the q/k/v family
    mods = dict(model.named_modules())
    assert torch.equal(mods[fam[0]].signs, mods[fam[1]].signs)


def test_quantize_llama_fused_equals_unfused():
    a, b = _llama(), _llama()
    names = llama_projections(a)
    assign = {n: "nuq-3" for n in names}
    blk = llama_blocks(a)[0]
    groups = [(blk["q"], blk["k"], blk["v"]), (blk["gate"], blk["up"])]
    quantize_llama(a, assign)
    quantize_llama(b, assign, groups)
    x = torch.randint(0, 256, (2, 16))
    assert_close(b(x).logits, a(x).logits, rtol=1e-5)


def test_quantize_llama_cache_reuses_layers_and_matches(monkeypatch):
    import qpalette.modules as qmod

    base = _llama()
    names = llama_projections(base)
    blk = llama_blocks(base)[0]
    groups = [(blk["q"], blk["k"], blk["v"])]
    assign = {n: "tcq-2-L6" for n in names}
    fresh = quantize_llama(copy.deepcopy(base), assign, groups)
    cache: dict = {}
    quantize_llama(copy.deepcopy(base), assign, cache=cache)
    assert len(cache) == len(names)
    calls = []
    real = qmod.quantize
    monkeypatch.setattr(qmod, "quantize", lambda *a, **k: calls.append(1) or real(*a, **k))
    cached = quantize_llama(copy.deepcopy(base), assign, groups, cache=cache)
    assert calls == []  # every layer came from the cache
    x = torch.randint(0, 256, (2, 16))
    assert_close(cached(x).logits, fresh(x).logits, rtol=1e-6)
    mods = dict(cached.named_modules())
    sq, sk = (mods[blk[r]].group.members[mods[blk[r]].index].signs for r in ("q", "k"))
    assert sq is sk  # one sign vector per family, as without the cache
    other = copy.deepcopy(base)
    with torch.no_grad():
        dict(other.named_modules())[names[0]].weight.add_(1.0)
    quantize_llama(other, assign, cache=cache)
    assert calls == [1]  # a changed weight is encoded again, not taken from the cache
    with pytest.raises(TypeError, match="cache"):
        quantize_llama(copy.deepcopy(base), assign, cache=[])


def test_quantize_llama_bad_inputs():
    m = _llama()
    names = llama_projections(m)
    with pytest.raises(ValueError, match="no module 'nope'"):
        quantize_llama(m, {"nope": "nuq-2"})
    blk = llama_blocks(m)[0]
    assign = {n: "nuq-3" for n in names}
    assign[blk["k"]] = "nuq-2"
    with pytest.raises(ValueError, match="identical codebooks"):
        quantize_llama(m, assign, [(blk["q"], blk["k"])])
    with pytest.raises(ValueError, match="same input"):
        quantize_llama(m, {n: "nuq-3" for n in names}, [(blk["q"], blk["o"])])
    with pytest.raises(ValueError, match="spec"):
        quantize_llama(m, {names[0]: "tcq-3.3"})


@pytest.mark.parametrize("objective", ["memory", "latency"])
def test_quantize_entry_point(objective):
    m = _llama()
    x = torch.randint(0, 256, (2, 16))
    ref = m(x).logits
    cfg = QPaletteConfig(bits=3, objective=objective, palette=["nuq-2", "nuq-3", "nuq-4", "vq-3"])
    quantize_(m, cfg)
    assert set(m.qpalette_assignment) == set(m.qpalette_sensitivities)
    out = m(x).logits
    assert torch.isfinite(out).all()
    assert float((out - ref).norm() / ref.norm()) < 0.5
    with pytest.raises(ValueError, match="objective"):
        QPaletteConfig(objective="speed")
