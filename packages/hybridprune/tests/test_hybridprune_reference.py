"""A pruned Mamba2 layer equals the float64 sequential scan on its sliced weights."""

import torch
from hybridprune import PruneTarget, collect_importance, prune
from hybridprune.reference import mamba2_mixer_reference

from neurips25_core.testing import FP32_RTOL, assert_close

# transformers' NemotronH/Mamba2 torch path runs the chunked scan in float32 whatever the model dtype
# (``mamba2_chunk_scan`` casts to float), so a float64 model matches the float64 reference to float32
# precision only: FP32_RTOL, not the float64 1e-10.


def _x(d, seed=0, T=11):
    return torch.randn(2, T, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_reference_reads_transformers_layout(make_nemotron_h, make_mamba2):
    for model, layers in (
        (make_nemotron_h(), lambda m: m.model.layers),
        (make_mamba2(), lambda m: m.backbone.layers),
    ):
        mixer = layers(model)[0].mixer
        x = _x(16)
        with torch.no_grad():
            assert_close(mixer(x), mamba2_mixer_reference(mixer, x), rtol=FP32_RTOL)


def test_pruned_mamba2_layer_equals_the_sequential_scan_on_its_sliced_weights(make_nemotron_h):
    model = make_nemotron_h()
    ids = torch.randint(3, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    imp = collect_importance(model, ids)
    student = prune(model, imp, PruneTarget(hidden_size=12, mamba_num_heads=4, mamba_head_dim=3))
    for blk in student.model.layers:
        if blk.block_type != "linear_attention":
            continue
        m = blk.mixer
        assert (m.num_heads, m.head_dim, m.norm.group_size, m.conv1d.weight.shape[0]) == (
            4,
            3,
            6,
            4 * 3 + 2 * 2 * 4,
        )
        x = _x(12, seed=2)
        with torch.no_grad():
            assert_close(m(x), mamba2_mixer_reference(m, x), rtol=FP32_RTOL)
