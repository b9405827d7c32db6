"""The torch-pruning peer: whole-GQA-group head pruning equals zeroing that group's weights."""

import copy

import pytest
import torch

from neurips25_core.models import tiny_llama, tiny_llama_config

pytest.importorskip("torch_pruning", reason="torch-pruning (the `peers` extra) is not installed")

from nbl.peers import head_groups, prune_attention_heads


def _model():
    cfg = tiny_llama_config(
        hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, max_position_embeddings=64
    )
    return tiny_llama(cfg, seed=0).eval()


def test_pruned_equals_zeroed_group():
    model = _model()
    groups = sorted(head_groups(model), key=lambda r: r["importance"])
    assert len(groups) == 4 and all(r["params"] == 4 * 48 * 12 + 2 * 48 * 12 for r in groups)
    zeroed = copy.deepcopy(model)
    r = groups[0]
    a = zeroed.model.layers[r["layer"]].self_attn
    q, kv = (
        slice(r["kv_head"] * 24, (r["kv_head"] + 1) * 24),
        slice(r["kv_head"] * 12, (r["kv_head"] + 1) * 12),
    )
    with torch.no_grad():
        a.q_proj.weight[q] = 0
        a.k_proj.weight[kv] = 0
        a.v_proj.weight[kv] = 0
        a.o_proj.weight[:, q] = 0
    out = prune_attention_heads(model, n_params=r["params"])
    assert out["removed"] == r["params"] and out["groups"] == [(r["layer"], r["kv_head"])]
    pruned = model.model.layers[r["layer"]].self_attn
    assert pruned.q_proj.out_features == 24 and pruned.o_proj.in_features == 24
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, zeroed(x).logits, rtol=1e-5, atol=1e-5)


def test_whole_layer_becomes_drop_and_bad_input():
    model = _model()
    total = sum(r["params"] for r in head_groups(model))
    out = prune_attention_heads(model, n_params=total)  # every group: both layers dropped
    assert len(out["groups"]) == 4
    assert all(type(lay.self_attn).__name__ == "DroppedAttention" for lay in model.model.layers)
    assert model(torch.randint(0, 256, (1, 8))).logits.isfinite().all()
    with pytest.raises(ValueError, match="n_params"):
        prune_attention_heads(_model(), n_params=0)


def test_rounding_brackets_the_target():
    per = head_groups(_model())[0]["params"]
    target = int(1.5 * per)
    down = prune_attention_heads(_model(), target, rounding="down")
    up = prune_attention_heads(_model(), target, rounding="up")
    assert down["removed"] == per <= target <= up["removed"] == 2 * per
    with pytest.raises(ValueError, match="rounding"):
        prune_attention_heads(_model(), target, rounding="floor")
