"""The transformers integration: hooked Llama = Granite = reference, groups, first step, bad input."""

import pytest
import torch
from completep import (
    ParamConfig,
    from_llama_config,
    param_groups,
    parameterize,
    reference_logits,
    scaled_config,
    to_granite_config,
)
from transformers import GraniteForCausalLM, LlamaForCausalLM

from neurips25_core.models import tiny_llama_config
from neurips25_core.testing import assert_close

CFG = ParamConfig(kind="completep", base_width=16, base_depth=1, input_alpha=1.5, output_alpha=2.0)


def _llama(depth=3, width=32, dtype=torch.float64, seed=0, **kw):
    config = tiny_llama_config(
        hidden_size=width, num_layers=depth, num_heads=4, num_kv_heads=2, intermediate_size=48, **kw
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype), config


def _ids(batch=2, seq=7, seed=1):
    return torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", ["sp", "mup", "depth_mup", "completep"])
def test_hooked_llama_equals_granite_equals_reference(kind):
    cfg = ParamConfig(kind=kind, base_width=16, base_depth=1, input_alpha=1.5, output_alpha=2.0)
    model, config = _llama()
    parameterize(model, cfg, generator=torch.Generator().manual_seed(0))
    model.eval()
    granite = GraniteForCausalLM(to_granite_config(config, cfg)).to(torch.float64).eval()
    missing = granite.load_state_dict(model.state_dict(), strict=True)
    assert not missing.missing_keys
    ids = _ids()
    with torch.no_grad():
        ours = model(ids).logits
        theirs = granite(ids).logits
        ref = reference_logits(model.state_dict(), config, cfg, ids)
    assert_close(ours, ref, rtol=1e-12)
    assert_close(theirs, ref, rtol=1e-12)


def test_cached_generation_and_checkpointing_match():
    model, config = _llama()
    parameterize(model, CFG)
    granite = GraniteForCausalLM(to_granite_config(config, CFG)).to(torch.float64)
    granite.load_state_dict(model.state_dict())
    model.eval(), granite.eval()
    ids = _ids(batch=1, seq=5)
    with torch.no_grad():
        full = model(ids).logits[:, -1]
        past = model(ids[:, :-1], use_cache=True).past_key_values
        cached = model(ids[:, -1:], past_key_values=past, use_cache=True).logits[:, -1]
        assert_close(cached, full, rtol=1e-12)
        kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(model.generate(ids, **kw), granite.generate(ids, **kw))
    # gradient checkpointing recomputes the hooked branches: same loss and gradients
    model.train()
    loss = model(ids, labels=ids).loss
    grads = torch.autograd.grad(loss, [p for p in model.parameters()])
    model.gradient_checkpointing_enable()
    loss2 = model(ids, labels=ids).loss
    grads2 = torch.autograd.grad(loss2, [p for p in model.parameters()])
    assert_close(loss2, loss, rtol=1e-12)
    for a, b in zip(grads2, grads, strict=True):
        assert_close(a, b, rtol=1e-12)


def test_each_hook_fires_once_per_branch_per_layer():
    model, _ = _llama(depth=4)
    handle = parameterize(model, CFG)
    calls = {}
    for i, layer in enumerate(model.model.layers):
        for name in ("o_proj", "down_proj"):
            mod = layer.self_attn.o_proj if name == "o_proj" else layer.mlp.down_proj
            mod.register_forward_hook(
                lambda *a, key=(i, name): calls.__setitem__(key, calls.get(key, 0) + 1)
            )
    with torch.no_grad():
        model(_ids())
    assert calls == {(i, n): 1 for i in range(4) for n in ("o_proj", "down_proj")}
    assert len(handle._hooks) == 2 * 4 + 2


def test_base_shape_bit_identical_across_mu_family():
    outs = {}
    for kind in ("mup", "depth_mup", "completep"):
        model, _ = _llama(depth=1, width=16, dtype=torch.float32)
        parameterize(
            model,
            ParamConfig(kind=kind, base_width=16, base_depth=1),
            generator=torch.Generator().manual_seed(3),
        )
        groups = param_groups(model, ParamConfig(kind=kind, base_width=16, base_depth=1), lr=1e-3)
        outs[kind] = (
            model(_ids()).logits.detach(),
            [(g["lr"], g["eps"], g["weight_decay"]) for g in groups],
        )
    for kind in ("depth_mup", "completep"):
        assert torch.equal(outs[kind][0], outs["mup"][0])
        assert outs[kind][1] == outs["mup"][1]


def test_init_statistics():
    model, _ = _llama(depth=2, width=128, dtype=torch.float32)
    parameterize(model, ParamConfig(kind="completep", base_width=32, base_depth=1, sigma_base=0.05))
    std = model.model.layers[0].mlp.up_proj.weight.std().item()
    assert std == pytest.approx(0.05 / 2, rel=0.05)
    assert model.model.embed_tokens.weight.std().item() == pytest.approx(0.05, rel=0.05)
    assert torch.equal(model.model.norm.weight, torch.ones_like(model.model.norm.weight))


def test_first_adamw_step_moves_each_entry_by_group_lr():
    model, _ = _llama(depth=4, width=32, dtype=torch.float32)
    parameterize(model, CFG)
    groups = param_groups(model, CFG, lr=1e-2, weight_decay=0.0, eps=1e-12)
    assert len({round(g["lr"], 12) for g in groups}) >= 2  # the groups really differ
    opt = torch.optim.AdamW(groups, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    before = [[p.detach().clone() for p in g["params"]] for g in opt.param_groups]
    for g in opt.param_groups:
        for p in g["params"]:
            p.grad = torch.randn(p.shape, generator=gen).sign() * (
                1 + torch.rand(p.shape, generator=gen)
            )
    opt.step()
    for g, olds in zip(opt.param_groups, before, strict=True):
        for p, old in zip(g["params"], olds, strict=True):
            step = (p.detach() - old).abs()
            assert torch.allclose(step, torch.full_like(step, g["lr"]), rtol=1e-6, atol=0), g[
                "name"
            ]


def test_param_groups_cover_each_parameter_once_and_lambdalr_keeps_ratios():
    model, _ = _llama(depth=2, tie_word_embeddings=True)
    parameterize(model, CFG)
    groups = param_groups(model, CFG, lr=1e-3)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert "unembedding" not in [g["name"] for g in groups]  # tied: counted as the embedding
    opt = torch.optim.AdamW(groups)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    sched.step()
    for g in opt.param_groups:
        assert g["lr"] == pytest.approx(0.5e-3 * g["lr_scale"], rel=1e-12)


def test_remove_restores_plain_llama():
    model, _ = _llama()
    torch.manual_seed(0)
    ids = _ids()
    handle = parameterize(model, CFG)
    with torch.no_grad():
        hooked = model(ids).logits
    handle.remove()
    assert not hasattr(model.config, "parameterization")
    with torch.no_grad():
        plain = model(ids).logits
    assert not torch.allclose(plain, hooked)
    parameterize(model, CFG, reinit=False)  # allowed again after remove
    with torch.no_grad():
        assert torch.equal(model(ids).logits, hooked)


def test_granite_round_trip(tmp_path):
    _, config = _llama()
    model = from_llama_config(config, CFG, seed=0)
    model.save_pretrained(tmp_path)
    back = GraniteForCausalLM.from_pretrained(tmp_path)
    assert back.config.parameterization == model.config.parameterization
    ids = _ids()
    with torch.no_grad():
        assert torch.equal(back.eval()(ids).logits, model.eval()(ids).logits)
    # a checkpoint of another shape is refused
    other = from_llama_config(scaled_config(config, 48, 3), CFG)
    other.save_pretrained(tmp_path / "other")
    with pytest.raises((RuntimeError, ValueError)):
        GraniteForCausalLM.from_pretrained(tmp_path / "other", config=model.config)


def test_scaled_config_keeps_head_dim_and_ffn_ratio():
    _, config = _llama(width=32)
    c = scaled_config(config, 64, 6)
    assert c.head_dim == 8 and c.num_attention_heads == 8 and c.num_key_value_heads == 4
    assert c.intermediate_size == 96 and c.num_hidden_layers == 6
    with pytest.raises(ValueError, match="hidden_size"):
        scaled_config(config, 36, 2)
    with pytest.raises(ValueError, match="num_layers"):
        scaled_config(config, 64, 0)


def test_bad_input():
    model, _config = _llama()
    with pytest.raises(TypeError, match="model"):
        parameterize(torch.nn.Linear(3, 3), CFG)
    with pytest.raises(TypeError, match="cfg"):
        parameterize(model, "completep")
    parameterize(model, CFG)
    w = model.model.layers[0].mlp.up_proj.weight.detach().clone()
    with pytest.raises(ValueError, match="already parameterized"):
        parameterize(model, CFG)
    assert torch.equal(w, model.model.layers[0].mlp.up_proj.weight)  # nothing lost
    model.extra = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="extra"):
        param_groups(model, CFG, lr=1e-3)
    with pytest.raises(ValueError, match="lr"):
        param_groups(model, CFG, lr=-1.0)
    with pytest.raises(TypeError, match="llama_config"):
        to_granite_config(object(), CFG)
