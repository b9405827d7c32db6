"""Bad input raises a clear ValueError/TypeError naming the argument."""

from __future__ import annotations

import pytest
import torch
from ptmoe import PromptMoE, PTMoEConfig, compose, masked_mean, route, svd_factors


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"prompt_length": 0}, ValueError, "prompt_length: expected >= 1"),
        ({"num_experts": 0}, ValueError, "num_experts"),
        ({"rank": 2.0}, TypeError, "rank: expected an int"),
        ({"top_k": 0}, ValueError, "top_k: expected >= 1"),
        ({"num_experts": 2, "top_k": 3}, ValueError, "top_k: expected 1 <= top_k <= num_experts"),
        ({"routing": "hard"}, ValueError, "routing: expected one of"),
        ({"init": "zeros"}, ValueError, "init: expected one of"),
        ({"router_noise": -1.0}, ValueError, "router_noise: expected >= 0"),
        ({"task_type": "SEQ_CLS"}, ValueError, "task_type"),
        ({"init_text": 3}, TypeError, "init_text"),
    ],
)
def test_config_checks(kwargs, error, match):
    with pytest.raises(error, match=match):
        PTMoEConfig(**kwargs)


def test_svd_init_rank_above_min_t_h():
    emb = torch.nn.Embedding(20, 6)
    with pytest.raises(ValueError, match=r"rank: the SVD init needs R <= min\(T, H\)"):
        PromptMoE(emb, PTMoEConfig(prompt_length=5, rank=6))
    with pytest.raises(ValueError, match=r"rank: the SVD init needs R <= min\(T, H\)"):
        PromptMoE(emb, PTMoEConfig(prompt_length=9, rank=7, init="vocab_svd"))
    PromptMoE(emb, PTMoEConfig(prompt_length=5, rank=6, init="normal"))  # allowed without SVD
    with pytest.raises(ValueError, match="rank: the SVD init"):
        svd_factors(torch.randn(4, 6), 5)


def test_non_float_embedding_and_wrong_types():
    emb = torch.nn.Embedding(20, 6)
    emb.weight = torch.nn.Parameter(torch.zeros(20, 6, dtype=torch.long), requires_grad=False)
    with pytest.raises(TypeError, match="embedding: expected floating-point weights"):
        PromptMoE(emb, PTMoEConfig(prompt_length=4, rank=2))
    with pytest.raises(TypeError, match=r"embedding: expected a torch\.nn\.Embedding"):
        PromptMoE(torch.nn.Linear(3, 3), PTMoEConfig(prompt_length=4, rank=2))
    with pytest.raises(TypeError, match="config: expected a PTMoEConfig"):
        PromptMoE(torch.nn.Embedding(5, 4), {"prompt_length": 4})


def test_forward_checks_mask_shape_and_inputs():
    moe = PromptMoE(torch.nn.Embedding(20, 6), PTMoEConfig(prompt_length=4, rank=2)).eval()
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"mask: expected shape \(1, 3\)"):
        moe(input_ids=ids, mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="input_ids: pass exactly one"):
        moe()
    with pytest.raises(TypeError, match="input_ids: expected an integer"):
        moe(input_ids=ids.float())
    with pytest.raises(ValueError, match="inputs_embeds: expected hidden size 6"):
        moe(inputs_embeds=torch.zeros(1, 3, 5))
    with pytest.raises(ValueError, match=r"mask: rows \[0\] select no source token"):
        moe(input_ids=ids, mask=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="init_ids: token ids must lie"):
        PromptMoE(torch.nn.Embedding(20, 6), PTMoEConfig(prompt_length=4, rank=2), init_ids=[25])


def test_op_checks():
    A, B, w = torch.ones(2, 3, 4), torch.ones(4, 5), torch.ones(1, 2)
    with pytest.raises(ValueError, match="B: expected 4 rows"):
        compose(A, torch.ones(3, 5), w)
    with pytest.raises(ValueError, match=r"weights: expected shape \(b, N=2\)"):
        compose(A, B, torch.ones(1, 3))
    with pytest.raises(TypeError, match="A: expected a floating-point tensor"):
        compose(A.long(), B, w)
    with pytest.raises(TypeError, match="B: expected the dtype of A"):
        compose(A, B.double(), w)
    with pytest.raises(ValueError, match="backend: expected one of"):
        compose(A, B, w, backend="triton")
    with pytest.raises(ValueError, match=r"top_k: expected 1 <= top_k <= N = 2"):
        route(torch.zeros(3, 2), top_k=3)
    with pytest.raises(ValueError, match="noise: expected shape"):
        route(torch.zeros(3, 2), noise=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="mask: expected shape"):
        masked_mean(torch.zeros(2, 3, 4), torch.ones(2, 4))
