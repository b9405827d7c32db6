"""compose / route / SVD init against the float64 reference, forward and backward, odd shapes."""

from __future__ import annotations

import math

import pytest
import torch
from ptmoe import PromptMoE, PTMoEConfig, compose, masked_mean, route, svd_factors
from ptmoe.reference import (
    compose_reference,
    masked_mean_reference,
    route_reference,
    svd_init_reference,
)

from neurips25_core.testing import assert_close, check_forward_backward, randn


def _sparse_weights(batch, n, k, seed):
    probs = torch.softmax(randn(batch, n, seed=seed, dtype=torch.float64), -1)
    kept, idx = probs.topk(k, -1)
    return torch.zeros_like(probs).scatter(1, idx, kept)


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("k_is_n", [False, True])
@pytest.mark.parametrize(("t", "r", "h"), [(7, 3, 11), (5, 5, 9)])
def test_compose_matches_float64_reference(n, k_is_n, t, r, h):
    k = n if k_is_n else 1
    A = randn(n, t, r, seed=1, dtype=torch.float64, requires_grad=True)
    B = randn(r, h, seed=2, dtype=torch.float64, requires_grad=True)
    w = _sparse_weights(3, n, k, seed=3).requires_grad_(True)
    assert int((w != 0).sum(1).max()) == k
    errors = check_forward_backward(
        compose, compose_reference, [A, B, w], rtol=1e-12, names=["A", "B", "weights"]
    )
    assert set(errors) == {"out0", "grad_A", "grad_B", "grad_weights"}
    # fp32 torch path against the float64 reference.
    A32, B32, w32 = (x.detach().float().requires_grad_(True) for x in (A, B, w))
    check_forward_backward(compose, compose_reference, [A32, B32, w32], rtol=1e-6)
    assert_close(compose(A, B, w, backend="reference"), compose_reference(A, B, w), rtol=0)


def test_masked_mean_and_route_match_reference():
    embeds = randn(4, 9, 6, seed=0, dtype=torch.float64)
    mask = torch.rand(4, 9, generator=torch.Generator().manual_seed(0)) < 0.6
    mask[:, 0] = True
    assert_close(masked_mean(embeds, mask), masked_mean_reference(embeds, mask), rtol=1e-12)
    pooled = randn(5, 6, seed=1, dtype=torch.float64)
    W, b, eps = randn(3, 6, seed=2, dtype=torch.float64), randn(3, seed=3), randn(5, 3, seed=4)
    for routing, k in (("topk", 1), ("topk", 2), ("topk", 3), ("soft", 1)):
        for noise in (None, eps.double()):
            ref_w, ref_l = route_reference(pooled, W, b.double(), routing, k, noise, sigma=0.7)
            logits = pooled @ W.T + b.double()
            weights, experts = route(logits, routing, k, noise=noise, sigma=0.7)
            assert_close(weights, ref_w, rtol=1e-12)
            assert_close(logits, ref_l, rtol=1e-12)
            kk = k if routing == "topk" else 3
            assert experts.shape == (5, kk)
            assert torch.equal((weights != 0).sum(1), torch.full((5,), kk))
            assert torch.equal(weights.gather(1, experts), weights.topk(kk, -1).values)


def test_gradcheck_through_the_router():
    torch.manual_seed(0)
    cfg = PTMoEConfig(prompt_length=3, num_experts=3, rank=2, top_k=2, init="normal")
    emb = torch.nn.Embedding(11, 5).double()
    moe = PromptMoE(emb, cfg).double().eval()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1]])

    def f(A, B, W, b):
        params = {"A": A, "B": B, "router.weight": W, "router.bias": b}
        out = torch.func.functional_call(moe, params, (ids,), {"mask": mask})
        return out.prompts

    inputs = tuple(
        p.detach().clone().requires_grad_(True)
        for p in (moe.A, moe.B, moe.router.weight, moe.router.bias)
    )
    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize(("t", "h"), [(5, 9), (7, 7)])
def test_svd_init_full_rank_recovers_embeddings(t, h):
    E = randn(t, h, seed=5, dtype=torch.float64)
    A, B = svd_factors(E, t)
    assert_close(A @ B, E, rtol=1e-10)
    ra, rb = svd_init_reference(E, t)
    assert_close(A, ra, rtol=1e-12)
    assert_close(B, rb, rtol=1e-12)


def test_svd_init_truncation_error_is_the_tail_of_the_spectrum():
    E = randn(9, 13, seed=6, dtype=torch.float64)
    sigma = torch.linalg.svdvals(E)
    for r in (1, 4, 8):
        A, B = svd_factors(E, r)
        err = torch.linalg.matrix_norm(A @ B - E).item()
        assert math.isclose(err, sigma[r:].square().sum().sqrt().item(), rel_tol=1e-10)


def test_prompt_moe_svd_init_gives_identical_experts_equal_to_the_embeddings():
    emb = torch.nn.Embedding(30, 8).double()
    ids = torch.tensor([3, 1, 4, 1, 5])
    cfg = PTMoEConfig(prompt_length=5, num_experts=3, rank=5, init="svd")
    moe = PromptMoE(emb, cfg, init_ids=ids)
    for i in range(3):
        assert_close(moe.A[i] @ moe.B, emb.weight[ids], rtol=1e-10)
    # Text shorter than T is repeated: T = 7 from 3 ids.
    cfg7 = PTMoEConfig(prompt_length=7, num_experts=2, rank=3, init="svd")
    moe7 = PromptMoE(emb, cfg7, init_ids=torch.tensor([2, 7, 9]))
    E7 = emb.weight[torch.tensor([2, 7, 9, 2, 7, 9, 2])].detach()
    A7, B7 = svd_factors(E7, 3)
    assert_close(moe7.A[1] @ moe7.B, A7 @ B7, rtol=1e-10)


def test_jitter_separates_experts_at_the_requested_scale():
    emb = torch.nn.Embedding(30, 8).double()
    g = torch.Generator().manual_seed(0)
    cfg = PTMoEConfig(prompt_length=6, num_experts=2, rank=4, init_jitter=1e-3)
    moe = PromptMoE(emb, cfg, generator=g)
    diff = (moe.A[0] - moe.A[1]).std().item()
    scale = moe.A.std().item() * 1e-3 * math.sqrt(2)
    assert 0.5 * scale < diff < 2 * scale


def test_parameter_count_equals_the_formula():
    emb = torch.nn.Embedding(40, 12)
    for cfg in (
        PTMoEConfig(prompt_length=7, num_experts=3, rank=5),
        PTMoEConfig(prompt_length=7, num_experts=2, rank=3, router_bias=False),
        PTMoEConfig(prompt_length=5, num_experts=1, rank=5, routing="uniform"),
    ):
        moe = PromptMoE(emb, cfg)
        n, t, r, h = cfg.num_experts, cfg.prompt_length, cfg.rank, 12
        router = 0 if cfg.routing == "uniform" else n * h + (n if cfg.router_bias else 0)
        assert sum(p.numel() for p in moe.parameters()) == n * t * r + r * h + router
        assert cfg.num_parameters(12) == n * t * r + r * h + router
        assert set(moe.state_dict()) <= {"A", "B", "router.weight", "router.bias"}
