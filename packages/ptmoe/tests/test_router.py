"""The router of PromptMoE: padding invariance, eval determinism, train-only multiplicative noise,
k non-zero weights, top-1 gradients, and source-mask isolation."""

from __future__ import annotations

import pytest
import torch
from ptmoe import PromptMoE, PTMoEConfig

from neurips25_core.testing import assert_close


def _moe(n=3, k=1, routing="topk", t=5, r=3, h=8, vocab=40, seed=0, **kw):
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(vocab, h)
    cfg = PTMoEConfig(prompt_length=t, num_experts=n, rank=r, top_k=k, routing=routing, **kw)
    return PromptMoE(emb, cfg)


def test_padding_invariance_left_and_right():
    moe = _moe(init_jitter=0.1).eval()
    ids = torch.tensor([[5, 9, 2, 7]])
    ref = moe(input_ids=ids)
    pad = 0
    right = torch.tensor([[5, 9, 2, 7, pad, pad, pad]])
    left = torch.tensor([[pad, pad, 5, 9, 2, 7]])
    for padded, mask in (
        (right, torch.tensor([[1, 1, 1, 1, 0, 0, 0]])),
        (left, torch.tensor([[0, 0, 1, 1, 1, 1]])),
    ):
        out = moe(input_ids=padded, mask=mask)
        assert_close(out.prompts, ref.prompts, rtol=1e-6)
        assert_close(out.weights, ref.weights, rtol=1e-6)
        assert torch.equal(out.experts, ref.experts)


def test_eval_is_deterministic_and_noise_is_train_only():
    moe = _moe()
    ids = torch.randint(0, 40, (6, 5), generator=torch.Generator().manual_seed(1))
    moe.eval()
    a, b = moe(input_ids=ids), moe(input_ids=ids)
    assert torch.equal(a.weights, b.weights) and torch.equal(a.prompts, b.prompts)
    moe.train()
    c, d = moe(input_ids=ids), moe(input_ids=ids)
    assert not torch.equal(c.weights, d.weights), "train mode draws fresh noise per call"
    assert torch.equal(c.logits, a.logits), "the returned logits are the pre-noise logits"
    # router_noise = 0 turns the noise off in training as well.
    quiet = _moe(router_noise=0.0).train()
    assert torch.equal(quiet(input_ids=ids).weights, quiet(input_ids=ids).weights)


def test_noise_is_multiplicative_zero_logits_stay_zero():
    moe = _moe(n=4).train()
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.bias.zero_()
    out = moe(input_ids=torch.tensor([[1, 2, 3], [4, 5, 6]]))
    # softmax of zeros: every kept weight is exactly 1/N whatever the noise.
    kept = out.weights.gather(1, out.experts)
    assert torch.equal(kept, torch.full_like(kept, 0.25))


@pytest.mark.parametrize(
    ("n", "k", "routing"), [(3, 1, "topk"), (4, 2, "topk"), (3, 3, "topk"), (3, 1, "soft")]
)
def test_exactly_k_nonzero_weights(n, k, routing):
    moe = _moe(n=n, k=k, routing=routing).train()
    out = moe(input_ids=torch.randint(0, 40, (7, 4), generator=torch.Generator().manual_seed(2)))
    kk = k if routing == "topk" else n
    assert torch.equal((out.weights != 0).sum(1), torch.full((7,), kk))
    assert out.experts.shape == (7, kk)


def test_top1_gradients_unselected_experts_get_zero_router_nonzero():
    moe = _moe(n=3, k=1, init_jitter=0.1).eval()
    ids = torch.tensor([[3, 4, 5, 6]])
    out = moe(input_ids=ids)
    out.prompts.square().sum().backward()
    chosen = int(out.experts[0, 0])
    for i in range(3):
        nonzero = bool(moe.A.grad[i].abs().sum() > 0)
        assert nonzero == (i == chosen)
    assert moe.router.weight.grad.abs().sum() > 0
    assert moe.router.bias.grad.abs().sum() > 0
    assert moe.B.grad.abs().sum() > 0


def test_tokens_outside_the_source_mask_never_move_routing():
    moe = _moe(n=4, init_jitter=0.1).eval()
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 0, 0, 0]])
    ref = moe(input_ids=ids, mask=mask)
    other = ids.clone()
    other[0, 3:] = torch.tensor([30, 31, 32])
    out = moe(input_ids=other, mask=mask)
    assert torch.equal(out.weights, ref.weights) and torch.equal(out.logits, ref.logits)
    # ...while changing a source token does move the logits.
    moved = ids.clone()
    moved[0, 0] = 39
    assert not torch.equal(moe(input_ids=moved, mask=mask).logits, ref.logits)


def test_uniform_routing_has_no_router_and_weights_one_over_n():
    moe = _moe(n=4, routing="uniform").train()
    out = moe(input_ids=torch.tensor([[1, 2]]))
    assert moe.router is None
    assert torch.equal(out.weights, torch.full((1, 4), 0.25))
    assert_close(out.prompts, (moe.A.mean(0) @ moe.B)[None], rtol=1e-6)
