"""Baselines on the same prepend machinery: the reductions of the spec, peft equality, budgets."""

from __future__ import annotations

import pytest
import torch
from ptmoe import (
    DecomposedPromptTuning,
    PromptTuning,
    PTMoEConfig,
    SMoP,
    apply_prompt,
    budget,
    get_peft_model,
)

from neurips25_core.testing import assert_close


def test_ptmoe_n1_uniform_equals_dpt(tiny_llama, make_batch):
    base = tiny_llama()
    cfg = PTMoEConfig(prompt_length=6, num_experts=1, rank=4, routing="uniform")
    ours = get_peft_model(base, cfg).train()
    dpt = DecomposedPromptTuning(base.get_input_embeddings(), 6, 4)
    with torch.no_grad():
        dpt.A.copy_(ours.prompt_encoder.A[0])
        dpt.B.copy_(ours.prompt_encoder.B)
    other = apply_prompt(base, dpt).train()
    ids, labels = make_batch()
    a, b = ours(input_ids=ids, labels=labels), other(input_ids=ids, labels=labels)
    assert_close(ours.last_routing.prompts, other.last_routing.prompts, rtol=1e-6)
    assert_close(a.logits, b.logits, rtol=1e-6)


def test_smop_with_one_prompt_equals_pt_even_with_noise(tiny_llama):
    emb = tiny_llama().get_input_embeddings()
    pt = PromptTuning(emb, 5)
    smop = SMoP(emb, num_experts=1, prompt_length=5).train()
    with torch.no_grad():
        smop.prompts.copy_(pt.prompt[None])
    ids = torch.tensor([[4, 5, 6], [7, 8, 9]])
    assert torch.equal(smop(input_ids=ids).prompts, pt(input_ids=ids).prompts)


def test_dpt_with_full_rank_identity_b_equals_pt():
    emb = torch.nn.Embedding(30, 6).double()
    pt = PromptTuning(emb, 7)
    dpt = DecomposedPromptTuning(emb, 7, 6)
    with torch.no_grad():
        dpt.A.copy_(pt.prompt)
        dpt.B.copy_(torch.eye(6))
    ids = torch.tensor([[1, 2]])
    assert_close(dpt(input_ids=ids).prompts, pt(input_ids=ids).prompts, rtol=1e-12)


def test_smop_routes_top1_without_renormalising(tiny_llama):
    emb = tiny_llama().get_input_embeddings()
    smop = SMoP(emb, num_experts=3, prompt_length=4).eval()
    out = smop(input_ids=torch.tensor([[4, 5, 6], [10, 11, 12]]))
    probs = torch.softmax(out.logits, -1)
    for b in range(2):
        e = int(out.experts[b, 0])
        assert_close(out.prompts[b], probs[b, e] * smop.prompts[e], rtol=1e-6)
    assert smop.router.bias is None
    assert sum(p.numel() for p in smop.parameters()) == budget.count(
        "smop", 4, 32, 4, num_experts=3
    )


def test_our_prompt_tuning_equals_peft_with_the_same_prompt(tiny_llama, make_batch):
    peft = pytest.importorskip("peft", reason="peft (the `peers` extra) is not installed")
    base = tiny_llama()
    ours = apply_prompt(base, PromptTuning(base.get_input_embeddings(), 5)).eval()
    theirs = peft.get_peft_model(
        tiny_llama(),
        peft.PromptTuningConfig(
            task_type="CAUSAL_LM", num_virtual_tokens=5, prompt_tuning_init="SAMPLE_VOCAB"
        ),
    ).eval()
    with torch.no_grad():
        theirs.prompt_encoder["default"].embedding.weight.copy_(ours.prompt_encoder.prompt)
    ids, labels = make_batch()
    a, b = ours(input_ids=ids, labels=labels), theirs(input_ids=ids, labels=labels)
    assert_close(a.logits, b.logits, rtol=1e-6)
    assert_close(a.loss, b.loss, rtol=1e-6)
    assert ours.get_nb_trainable_parameters()[0] == theirs.get_nb_trainable_parameters()[0]


def test_budget_reproduces_the_issue_arms_at_hidden_128():
    assert budget.count("pt", 40, 128, 40) == 5120
    assert budget.solve("dpt", 5120, H=128, T=40) == {
        "kind": "dpt",
        "value": 30,
        "params": 5040,
        "relative": 5040 / 5120 - 1,
    }
    assert budget.solve("ptmoe", 5120, H=128, T=40, num_experts=2)["params"] == 5042
    assert budget.count("smop", 20, 128, 40, num_experts=2) == 5376
    # LoRA r on q and v of 4 layers (d_in + d_out = 256 each): r = 3 gives 6,144, which is 20 %
    # over the budget, as the issue says; no r lands within ±5 %, and solve says so.
    assert budget.count("lora", 3, 128, 40, lora_dims=4 * 2 * 256) == 6144
    with pytest.raises(
        ValueError, match=r"target_params: no lora size .* \(nearest: 2 -> 4096, 3 -> 6144\)"
    ):
        budget.solve("lora", 5120, H=128, T=40, lora_dims=4 * 2 * 256)
    # The spec's H = 2048 budgets: PT-MoE N = 2, R = 36 is 80,706; DPT R = 39 is 81,432.
    assert budget.count("ptmoe", 36, 2048, 40) == 80706
    assert budget.count("dpt", 39, 2048, 40) == 81432
    assert budget.count("smop", 20, 2048, 40) == 86016


def test_baseline_bad_input(tiny_llama):
    emb = torch.nn.Embedding(20, 6)
    with pytest.raises(ValueError, match="prompt_length: expected >= 1"):
        PromptTuning(emb, 0)
    with pytest.raises(ValueError, match=r"rank: the SVD init needs R <= min\(T, H\)"):
        DecomposedPromptTuning(emb, 4, 5)
    with pytest.raises(TypeError, match="num_experts: expected an int"):
        SMoP(emb, 2.0, 4)
    with pytest.raises(ValueError, match="init_ids: token ids must lie"):
        PromptTuning(emb, 3, init_ids=[40])
    with pytest.raises(ValueError, match="kind: expected one of"):
        budget.solve("prefix", 100, 8, 4)
    with pytest.raises(ValueError, match="lora_dims: kind='lora' needs"):
        budget.solve("lora", 100, 8, 4)
    with pytest.raises(
        TypeError, match="prompt_encoder: expected an int attribute 'prompt_length'"
    ):
        apply_prompt(tiny_llama(), torch.nn.Linear(2, 2))
