"""compute_deltas / compress / apply_deltas on a real transformers model; bad input; baselines."""

import pytest
import torch
from ultradelta import (
    UltraDeltaConfig,
    apply_deltas,
    bitdelta,
    compress,
    compute_deltas,
    dare,
    delta_come_lite,
    magnitude_prune,
)

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import randn


@pytest.fixture(scope="module")
def models():
    cfg = tiny_llama_config(hidden_size=32, num_layers=2, num_heads=2)
    base = tiny_llama(cfg, seed=0)
    ft = tiny_llama(cfg, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ft.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    return base, ft


def test_round_trip_into_llama(models):
    base, ft = models
    pre, post = base.state_dict(), ft.state_dict()
    deltas = compute_deltas(pre, post)
    assert all(".layers." in k and v.dim() == 2 for k, v in deltas.items())
    assert not any("embed" in k or "norm" in k for k in deltas)
    (c,) = compress([deltas], UltraDeltaConfig(sparsity=0.0, step=0.0, bits=8))
    sd = apply_deltas(pre, c, others="keep", ft_sd=post)
    model = type(base)(base.config)
    model.load_state_dict(sd)
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        err = (model(x).logits - ft(x).logits).norm() / ft(x).logits.norm()
    assert float(err) < 0.05  # 8-bit min-max codes of the delta only
    dropped = apply_deltas(pre, c)  # others="drop": non-compressed tensors at their base value
    assert torch.equal(dropped["model.embed_tokens.weight"], pre["model.embed_tokens.weight"])


def test_bad_input(models):
    base, ft = models
    pre, post = base.state_dict(), ft.state_dict()
    deltas = compute_deltas(pre, post)
    with pytest.raises(ValueError, match="sparsity"):
        UltraDeltaConfig(sparsity=1.0)
    with pytest.raises(ValueError, match="sparsity"):
        UltraDeltaConfig(sparsity=-0.1)
    with pytest.raises(ValueError, match="sparsity \\+ step"):
        UltraDeltaConfig(sparsity=0.995, step=0.01)
    with pytest.raises(ValueError, match="bits"):
        UltraDeltaConfig(bits=9)
    with pytest.raises(ValueError, match="bits"):
        UltraDeltaConfig(bits=0)
    with pytest.raises(TypeError, match="bits"):
        UltraDeltaConfig(bits=4.0)
    with pytest.raises(ValueError, match="others"):
        apply_deltas(pre, deltas, others="merge")
    k = next(iter(deltas))
    bad = dict(deltas)
    bad[k] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="shape"):
        apply_deltas(pre, bad)
    with pytest.raises(ValueError, match="not in pre_sd"):
        apply_deltas(pre, {"nope.weight": torch.zeros(2, 2)})
    with pytest.raises(TypeError, match="floating-point"):
        compress([{"w": torch.ones(3, 3, dtype=torch.int64)}])
    with pytest.raises(TypeError, match="deltas"):
        apply_deltas(pre, {k: deltas[k].long()})
    with pytest.raises(ValueError, match="ft_sd"):
        compute_deltas(pre, {**post, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="ft_sd"):
        apply_deltas(pre, deltas, others="keep")


def test_stage_switches_change_what_they_should():
    d = {
        "a": randn(40, 40, seed=1),
        "b": randn(40, 40, seed=2) * 0.1,
        "c": randn(40, 40, seed=5) * 3,
    }
    full = compress([d])[0]
    no_q = compress([d], UltraDeltaConfig(quantize=False))[0]
    assert all(v.codes is None for v in no_q.tensors.values())
    no_msa = compress([d], UltraDeltaConfig(mixed=False))[0]
    kept_full = [v.kept for v in full.tensors.values()]
    kept_flat = [v.kept for v in no_msa.tensors.values()]
    # MSA: b (lowest std) at 0.98, a at 0.97, c at 0.96; without it all at 0.97 (up to per-level
    # rounding, at most one entry per level)
    assert max(kept_flat) - min(kept_flat) <= 16
    assert [abs(k - n) <= 16 for k, n in zip(kept_full, (48, 32, 64))] == [True] * 3
    no_dac = compress([d], UltraDeltaConfig(distribution_aware=False))[0]
    assert sum(v.kept for v in no_dac.tensors.values()) == pytest.approx(0.03 * 4800, rel=0.35)


def test_baselines():
    d = {"w": randn(64, 48, seed=3)}
    g = torch.Generator().manual_seed(0)
    dd = dare(d, 0.9, g)
    assert dd.tensors["w"].scale == pytest.approx(10.0)
    assert dd.tensors["w"].kept == pytest.approx(0.1 * 64 * 48, rel=0.15)
    mp = magnitude_prune(d, 0.9).to_dense()["w"]
    kept = mp != 0
    assert int(kept.sum()) == 308
    assert float(mp.abs()[kept].min()) >= float(d["w"].abs()[~kept].max())
    bd, bits = bitdelta(d)
    assert torch.allclose(bd["w"].abs(), d["w"].abs().mean().expand(64, 48))
    assert bits == 64 * 48 + 16
    full, _ = delta_come_lite(d, (48, 0, 0))
    assert float((full["w"] - d["w"]).norm() / d["w"].norm()) < 0.02
    _low, low_bits = delta_come_lite(d, (1, 2, 4))
    assert low_bits == 7 * 0 + 1 * (112 * 8 + 48) + 2 * (112 * 3 + 48) + 4 * (112 * 2 + 48)


def test_peft_dare_rescale():
    merge_utils = pytest.importorskip(
        "peft.utils.merge_utils", reason="peft (the `peers` extra) is not installed"
    )
    t = randn(200, 200, seed=4)
    out = merge_utils.random_pruning(t, density=0.1, rescale=True)
    kept = out != 0
    assert torch.allclose(out[kept], t[kept] / 0.1, rtol=1e-5)
