"""LESS warm-up checkpoints and projected per-example LoRA gradient features."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from qcs.baselines import less_scores, less_selection
from qcs.less import LessWarmup, less_features, less_warmup
from qcs.tasks import make_instruction_pool, make_target_set

from neurips25_core.models import tiny_llama, tiny_llama_config

pytest.importorskip("peft", reason="peft is a dependency of qcs; run `uv sync --all-packages`")


@pytest.fixture(scope="module")
def warm():
    base = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2), seed=0)
    pool = make_instruction_pool(16, seed=0)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    w = less_warmup(base, pool, fraction=0.25, epochs=2, batch_size=2, lr=1e-2)
    for k, v in base.state_dict().items():
        assert torch.equal(v, before[k]), k
    return base, pool, w


def test_warmup_checkpoints(warm):
    _, _, w = warm
    assert w.rows.numel() == 4 and len(w.checkpoints) == 2
    lrs = w.checkpoint_weights
    assert bool((lrs > 0).all()) and float(lrs[1]) < float(lrs[0])  # linear decay
    D = sum(p.numel() for p in w.model.parameters() if p.requires_grad)
    for ck in w.checkpoints:
        assert ck.exp_avg.shape == ck.exp_avg_sq.shape == (D,)
        assert bool((ck.exp_avg_sq > 0).any())
    assert not all(
        torch.equal(a, b)
        for a, b in zip(w.checkpoints[0].adapter, w.checkpoints[1].adapter, strict=True)
    )


def test_features_match_hand_computation_and_feed_less_scores(warm):
    _, pool, w = warm
    target = make_target_set(4, seed=1)
    tr = less_features(w, pool[:8], kind="adam", proj_dim=64, seed=3)
    va = less_features(w, target, kind="sgd", proj_dim=64, seed=3)
    assert tr.shape == (2, 8, 64) and va.shape == (2, 4, 64)
    assert torch.allclose(tr.norm(dim=-1), torch.ones(2, 8), atol=1e-5)
    # hand: checkpoint 0, pool example 5, Adam-preconditioned, same Rademacher matrix
    model = w.model
    params = [p for p in model.parameters() if p.requires_grad]
    ck = w.checkpoints[0]
    with torch.no_grad():
        for p, p0 in zip(params, ck.adapter, strict=True):
            p.copy_(p0)
    p5 = pool[5]
    prompt = f"Q: {p5.instruction}\nA: ".encode()
    full = list(prompt + p5.response.encode() + b"\n")
    logits = model(input_ids=torch.tensor([full[:-1]])).logits[0]
    loss = F.cross_entropy(logits[len(prompt) - 1 :], torch.tensor(full[len(prompt) :]))
    g = torch.cat([x.reshape(-1) for x in torch.autograd.grad(loss, params)])
    m = 0.9 * ck.exp_avg + 0.1 * g
    v = 0.999 * ck.exp_avg_sq + 0.001 * g * g
    D = g.numel()
    proj = torch.randint(0, 2, (D, 64), generator=torch.Generator().manual_seed(3)).float() * 2 - 1
    hand = F.normalize((m / torch.sqrt(v + 1e-8)) @ proj, dim=0)
    assert torch.allclose(tr[0, 5], hand, atol=1e-5)
    scores = less_scores(tr, va, w.checkpoint_weights, torch.tensor([0, 0, 1, 1]))
    assert less_selection(scores, 3).numel() == 3


def test_bad_input(warm):
    base, pool, w = warm
    with pytest.raises(ValueError, match="kind"):
        less_features(w, pool, kind="sign")
    with pytest.raises(TypeError, match="warmup"):
        less_features(base, pool)
    with pytest.raises(ValueError, match="fraction"):
        less_warmup(base, pool, fraction=0.0)
    with pytest.raises(ValueError, match="proj_dim"):
        less_features(w, pool, proj_dim=0)
    assert isinstance(w, LessWarmup)
