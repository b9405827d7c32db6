"""Mask baselines: flat_channel (Mamba2 channels ranked flat, zeroed) and Wanda-style masks."""

from __future__ import annotations

import pytest
import torch
from hybridprune import PruneTarget, collect_importance, count_params, distill, prune
from hybridprune.masks import apply_masks, count_nonzero, flat_channel_masks, wanda_masks
from torch import nn


def _ids(batch=3, seq=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 64, (batch, seq), generator=g)


def test_flat_channel_ranks_all_channels_flat_and_keeps_the_zeros_through_distill(make_nemotron_h):
    teacher = make_nemotron_h(dtype=torch.float32)
    imp = collect_importance(teacher, _ids())
    H, P = teacher.config.mamba_num_heads, teacher.config.mamba_head_dim
    # every top channel in head 0: flat ranking keeps them all, whatever the groups
    for i in imp.mamba_x:
        x = torch.rand(H, P) * 0.1
        x[0] += 10.0
        imp.mamba_x[i] = x
    target = PruneTarget(mamba_num_heads=H // 2, mamba_head_dim=P // 2)
    keep = (H // 2) * (P // 2)
    student = prune(teacher, imp, target, mamba_strategy="flat_channel")
    assert student.config.mamba_num_heads == H and student.config.mamba_head_dim == P  # dense
    for blk in student.model.layers:
        mixer = blk.mixer
        if not hasattr(mixer, "A_log"):
            continue
        kept = mixer.out_proj.weight.abs().sum(0) != 0
        assert int(kept.sum()) == keep
        assert bool(kept[:P].all())  # head 0 whole: no per-head or per-group structure
        d_in = H * P
        assert torch.equal(mixer.in_proj.weight[:d_in].abs().sum(1) != 0, kept)  # z rows
        assert torch.equal(mixer.in_proj.weight[d_in : 2 * d_in].abs().sum(1) != 0, kept)  # x
        assert torch.equal(mixer.conv1d.weight[:d_in].abs().sum((1, 2)) != 0, kept)
        assert torch.equal(mixer.norm.weight != 0, kept)
    n0 = count_nonzero(student)
    assert n0 < count_params(student.config)
    distill(student, teacher, [_ids(seed=1)], steps=3, lr=1e-2, warmup=0)
    assert count_nonzero(student) == n0
    nz = sum(int((p != 0).sum()) for p in student.parameters())
    assert nz <= n0  # the masked entries are still exactly zero after training


def test_wanda_masks_per_row_sparsity_and_activation_weighting(monkeypatch):
    torch.manual_seed(0)

    class Tiny(nn.Module):  # shaped like a causal LM for the hooks; ranked like Wanda
        def __init__(self):
            super().__init__()
            self.config = type("C", (), {"model_type": "llama"})()
            self.proj = nn.Linear(4, 3, bias=False)
            self.lm_head = nn.Linear(3, 5, bias=False)

        def forward(self, input_ids, attention_mask=None, use_cache=False):
            x = torch.nn.functional.one_hot(input_ids, 4).double() * torch.tensor(
                [10.0, 1.0, 1.0, 0.01], dtype=torch.float64
            )
            return self.lm_head(self.proj(x.float()))

    model = Tiny()
    with torch.no_grad():
        model.proj.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 3))
    ids = torch.tensor([[0, 1, 2, 3, 3, 3]])
    from hybridprune import masks as masks_mod

    # the layout check wants a transformers model; this one only needs the Linear hooks
    monkeypatch.setattr(masks_mod, "model_layout", lambda m: ("llama", nn.ModuleList()))
    m = wanda_masks(model, ids, 0.5)
    kept = m["proj.weight"]
    assert "lm_head.weight" not in m
    assert kept.sum(1).tolist() == [2, 2, 2]
    # |W| alone would keep columns 2 and 3; |W|·‖X‖ keeps column 0 (large input) and 2
    assert kept[0].tolist() == [True, False, True, False]


def test_wanda_on_nemotron_h_counts_and_bad_input(make_nemotron_h):
    model = make_nemotron_h(dtype=torch.float32)
    m = wanda_masks(model, _ids(), 0.5)
    for name, mask in m.items():
        assert abs(mask.float().mean(1) - 0.5).max() <= 0.5 / mask.shape[1] + 1e-9, name
    with pytest.raises(ValueError, match="sparsity"):
        wanda_masks(model, _ids(), 1.0)
    with pytest.raises(ValueError, match="masks"):
        apply_masks(model, {"nope": torch.ones(1, dtype=torch.bool)})
    with pytest.raises(TypeError, match="model"):
        flat_channel_masks(nn.Linear(2, 2), {}, 1)
