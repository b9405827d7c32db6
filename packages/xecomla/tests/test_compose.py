"""compose + hybrid_cache: swapped mixers, teacher untouched, cached greedy generate = no-cache decoding."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM
from xecomla import Mamba2FromAttention, MLAAttention, MLAConfig, compose, hybrid_cache

from neurips25_core.testing import assert_close

MLA = MLAConfig(r_q=16, r_kv=12, d_nope=4, d_rope=4, d_v=8)


def _teacher(llama_config, layers=4, dtype=torch.float64):
    cfg = llama_config(layers=layers)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _no_cache_greedy(model, ids, n):
    for _ in range(n):
        logits = model(input_ids=ids).logits
        ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
    return ids


@pytest.mark.parametrize(
    "layout",
    [
        dict(mla_layers=[0, 2]),
        dict(mla_layers=[0], gqa_layers=[2]),
        dict(mla_layers=[], gqa_layers=[0, 2]),
        dict(mla_layers=[0, 1, 2, 3]),
    ],
    ids=["zebra", "mla_gqa_mamba", "mambainllama", "all_mla"],
)
def test_cached_generate_equals_no_cache_decoding(llama_config, layout):
    teacher = _teacher(llama_config)
    torch.manual_seed(1)
    hybrid = compose(teacher, mla_config=MLA, **layout).eval()
    with (
        torch.no_grad()
    ):  # random z/dt rows make a weak signal: scale the head so argmax is decisive
        hybrid.lm_head.weight.mul_(20)
    hybrid.generation_config.eos_token_id = None  # greedy for the full length, no early stop
    ids = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = _no_cache_greedy(hybrid, ids, 6)
        got = hybrid.generate(
            ids, cache=hybrid_cache(hybrid), use_cache=True, max_new_tokens=6, do_sample=False
        )
    assert torch.equal(got, want)
    # and the cached logits equal the no-cache logits step by step (float64)
    cache = hybrid_cache(hybrid)
    with torch.no_grad():
        steps = [hybrid(input_ids=want[:, :6], cache=cache, use_cache=True).logits]
        for t in range(6, 12):
            steps.append(hybrid(input_ids=want[:, t : t + 1], cache=cache, use_cache=True).logits)
        full = hybrid(input_ids=want).logits
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-10)


def test_compose_swaps_and_copies(llama_config):
    teacher = _teacher(llama_config)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    hybrid = compose(teacher, mla_layers=[0, 3], mla_config=MLA, gqa_layers=[1])
    kinds = [type(layer.self_attn) for layer in hybrid.model.layers]
    assert kinds[0] is MLAAttention and kinds[3] is MLAAttention and kinds[2] is Mamba2FromAttention
    assert hybrid.model.layers[1].self_attn is not teacher.model.layers[1].self_attn
    assert torch.equal(
        hybrid.model.layers[1].self_attn.q_proj.weight,
        teacher.model.layers[1].self_attn.q_proj.weight,
    )
    assert torch.equal(
        hybrid.model.layers[2].mlp.up_proj.weight, teacher.model.layers[2].mlp.up_proj.weight
    )
    assert all(
        torch.equal(v, before[k]) for k, v in teacher.state_dict().items()
    )  # teacher untouched
    assert hybrid.hybrid_layout.kinds == ("mla", "gqa", "mamba2", "mla")


def test_compose_bad_input(llama_config):
    teacher = _teacher(llama_config)
    before = [type(layer.self_attn) for layer in teacher.model.layers]
    with pytest.raises(ValueError, match="mla_layers: duplicate"):
        compose(teacher, mla_layers=[0, 0], mla_config=MLA)
    with pytest.raises(ValueError, match="out of range"):
        compose(teacher, mla_layers=[4], mla_config=MLA)
    with pytest.raises(ValueError, match="overlapping"):
        compose(teacher, mla_layers=[0, 1], mla_config=MLA, gqa_layers=[1])
    with pytest.raises(ValueError, match="d_nope, d_rope"):
        compose(teacher, mla_layers=[0], mla_config=MLAConfig(16, 8, 4, 2, 8))
    with pytest.raises(ValueError, match="mamba_init"):
        compose(teacher, mla_layers=[0], mla_config=MLA, mamba_init="svd")
    with pytest.raises(TypeError, match="llama"):
        compose(torch.nn.Linear(2, 2), mla_layers=[0], mla_config=MLA)
    assert [type(layer.self_attn) for layer in teacher.model.layers] == before
    with pytest.raises(ValueError, match="all-Mamba2"):
        hybrid_cache(compose(teacher, mla_layers=[], mla_config=None))


# eager runs in float32: transformers' eager softmax casts to float32, which turns float64's
# finfo.min mask into -inf, so a fully padded query row of the *teacher* is NaN in float64 already
@pytest.mark.parametrize(
    ("attn_implementation", "dtype", "rtol"),
    [("sdpa", torch.float64, 1e-10), ("eager", torch.float32, 1e-5)],
)
def test_left_padded_batch_cached_equals_full_all_mla(
    llama_config, attn_implementation, dtype, rtol
):
    """A left-padded batch through an all-MLA model: the masked absorbed decode (the model's 4-D
    bool or additive mask) gives the full forward's logits at every real position."""
    teacher = _teacher(llama_config, dtype=dtype)
    teacher.config._attn_implementation = attn_implementation
    hybrid = compose(teacher, mla_layers=[0, 1, 2, 3], mla_config=MLA).eval()
    ids = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0  # row 0 is left-padded by 3
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    cache = hybrid_cache(hybrid)
    with torch.no_grad():
        full = hybrid(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        steps = [
            hybrid(
                input_ids=ids[:, :6],
                attention_mask=mask[:, :6],
                position_ids=pos[:, :6],
                cache=cache,
                use_cache=True,
            ).logits
        ]
        for t in range(6, 9):
            steps.append(
                hybrid(
                    input_ids=ids[:, t : t + 1],
                    attention_mask=mask[:, : t + 1],
                    position_ids=pos[:, t : t + 1],
                    cache=cache,
                    use_cache=True,
                ).logits
            )
    got = torch.cat(steps, dim=1)
    real = mask.bool()
    assert_close(got[real], full[real], rtol=rtol)
