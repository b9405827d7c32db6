"""ILD, logit distillation, SMART sensitivity; two-process gloo = one process on the union batch."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM
from xecomla import MLAConfig, compose, distill, ild, kl_divergence, layer_sensitivity

from neurips25_core.distributed import run_distributed

MLA = MLAConfig(r_q=16, r_kv=12, d_nope=4, d_rope=4, d_v=8)


def _teacher(layers=2):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        intermediate_size=64,
        vocab_size=32,
        max_position_embeddings=64,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).double().eval()


def _ids(b=4, t=8, seed=1):
    return torch.randint(0, 32, (b, t), generator=torch.Generator().manual_seed(seed))


def test_batchmean_is_token_sum_over_b():
    s, t = torch.randn(3, 5, 7, dtype=torch.float64), torch.randn(3, 5, 7, dtype=torch.float64)
    p_t = t.softmax(-1)
    token_sum = (p_t * (t.log_softmax(-1) - s.log_softmax(-1))).sum()
    assert torch.isclose(kl_divergence(s, t, "batchmean"), token_sum / 3, rtol=1e-12)
    assert torch.isclose(kl_divergence(s, t, "token_mean"), token_sum / 15, rtol=1e-12)
    # the official call on 3-D logits, for the record
    official = torch.nn.functional.kl_div(s.log_softmax(-1), p_t, reduction="batchmean")
    assert torch.isclose(kl_divergence(s, t, "batchmean"), official, rtol=1e-12)
    with pytest.raises(ValueError, match="kl_reduction"):
        kl_divergence(s, t, "sum")


def test_ild_of_the_teacher_itself_is_zero_and_trains():
    teacher = _teacher()
    copy_ = compose(teacher, mla_layers=[], mla_config=None, gqa_layers=[0, 1])
    assert ild(copy_, teacher, [_ids()], steps=1, lr=1e-12)[0] == 0.0  # teacher forcing is exact
    torch.manual_seed(3)
    zebra = compose(teacher, mla_layers=[0], mla_config=MLA)
    losses = ild(zebra, teacher, [_ids()], steps=6, lr=3e-3)
    assert losses[0] > 0 and losses[-1] < losses[0]


def test_distill_and_sensitivity_run():
    teacher = _teacher()
    torch.manual_seed(4)
    zebra = compose(teacher, mla_layers=[0], mla_config=MLA)
    losses = distill(zebra, teacher, [_ids()], steps=4, lr=3e-3, kl_reduction="batchmean")
    assert len(losses) == 4 and losses[-1] < losses[0]
    torch.manual_seed(5)
    mla = compose(teacher, mla_layers=[0, 1], mla_config=MLA)
    mamba = compose(teacher, mla_layers=[], mla_config=None)
    before = [type(layer.self_attn) for layer in mamba.model.layers]
    s = layer_sensitivity(mla, mamba, teacher, [_ids(seed=6)])
    assert len(s) == 2 and all(isinstance(v, float) for v in s)
    assert [type(layer.self_attn) for layer in mamba.model.layers] == before  # restored


def test_bad_input():
    teacher = _teacher()
    student = compose(teacher, mla_layers=[0], mla_config=MLA)
    with pytest.raises(ValueError, match="kl_reduction"):
        distill(student, teacher, [_ids()], steps=1, kl_reduction="mean")
    with pytest.raises(ValueError, match="steps"):
        ild(student, teacher, [_ids()], steps=0)
    with pytest.raises(ValueError, match="lr"):
        distill(student, teacher, [_ids()], steps=1, lr=-1.0)
    with pytest.raises(ValueError, match="batches"):
        ild(student, teacher, [], steps=1)


def _train_both(rank, world, union):
    teacher = _teacher()
    torch.manual_seed(7)
    student = compose(teacher, mla_layers=[0], mla_config=MLA)
    ids = _ids(b=4, seed=8)
    mine = ids if union else ids[rank * 2 : rank * 2 + 2]
    ild(student, teacher, [mine], steps=5, lr=1e-3)
    distill(student, teacher, [mine], steps=5, lr=1e-3, kl_reduction="batchmean")
    return {k: v.detach().clone() for k, v in student.state_dict().items()}


def test_two_process_gloo_equals_one_process():
    ranks = run_distributed(_train_both, world_size=2, args=(False,))
    single = _train_both(0, 1, True)
    for name, want in single.items():
        for got in ranks:
            err = float((got[name] - want).norm() / want.norm().clamp_min(1e-30))
            assert err <= 1e-6, (name, err)
