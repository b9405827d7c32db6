"""QuantLinear, quantize_ on a transformers Llama, training, state-dict round trip, pack_ and model_size_bits."""

from __future__ import annotations

import copy
import io

import paretoq
import pytest
import torch
from torch import nn

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close, randint, randn

BITS = (1, 1.58, 2, 3, 4)
LINEARS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def _model(seed=0):
    return tiny_llama(
        tiny_llama_config(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48),
        seed=seed,
    )


def _tokens(seed=0):
    return randint(0, 256, 2, 19, seed=seed)


@pytest.mark.parametrize("bits", BITS)
def test_quantize_swaps_exactly_the_projections(bits):
    model = _model()
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    emb_w = emb.weight.detach().clone()
    before = {
        n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, nn.Linear)
    }
    paretoq.quantize_(model, bits)
    swapped = {n for n, m in model.named_modules() if isinstance(m, paretoq.QuantLinear)}
    assert {n.rsplit(".", 1)[-1] for n in swapped} == LINEARS
    assert len(swapped) == 7 * 2
    assert model.get_input_embeddings() is emb and torch.equal(emb.weight, emb_w)
    assert model.get_output_embeddings() is head and type(head) is nn.Linear
    for n in swapped:
        m = model.get_submodule(n)
        assert m.bits == bits and m.alpha.shape == (m.out_features, 1)
        assert torch.equal(m.weight, before[n])  # latent weight untouched
        assert torch.equal(m.alpha, paretoq.alpha_init(before[n], bits))


def test_bits_16_is_a_no_op():
    model = _model()
    ref = copy.deepcopy(model)
    paretoq.quantize_(model, 16)
    x = _tokens()
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref(x).logits)
    assert not any(isinstance(m, paretoq.QuantLinear) for m in model.modules())


def test_quant_linear_16_bit_is_bit_identical():
    lin = nn.Linear(13, 7, bias=True)
    q = paretoq.QuantLinear.from_linear(lin, 16)
    x = randn(4, 13, seed=1)
    assert q.alpha is None
    assert torch.equal(q(x), lin(x))


def test_filter_fn_selects_and_protects():
    model = _model()
    paretoq.quantize_(model, 2, filter_fn=lambda m, fqn: fqn.endswith("mlp.down_proj"))
    swapped = [n for n, m in model.named_modules() if isinstance(m, paretoq.QuantLinear)]
    assert swapped == ["model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"]
    model = _model()
    with pytest.raises(ValueError, match="lm_head"):
        paretoq.quantize_(model, 2, filter_fn=lambda m, fqn: True)
    assert not any(isinstance(m, paretoq.QuantLinear) for m in model.modules())  # nothing mutated
    with pytest.raises(ValueError, match=r"no nn\.Linear"):
        paretoq.quantize_(_model(), 2, filter_fn=lambda m, fqn: False)
    with pytest.raises(ValueError, match="bits"):
        paretoq.quantize_(_model(), 5)


@pytest.mark.parametrize("bits", [1.58, 2, 4])
def test_qat_trains_weights_and_alpha(bits):
    model = _model()
    paretoq.quantize_(model, bits)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    x = _tokens(1)
    q0 = model.model.layers[0].self_attn.q_proj
    alpha0, w0 = q0.alpha.detach().clone(), q0.weight.detach().clone()
    losses = []
    for _ in range(8):
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        assert q0.alpha.grad is not None and q0.alpha.grad.abs().sum() > 0
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert not torch.equal(q0.alpha, alpha0) and not torch.equal(q0.weight, w0)


@pytest.mark.parametrize("bits", [1, 1.58, 3])
def test_state_dict_round_trip_keeps_alpha(bits):
    model = _model(seed=1)
    paretoq.quantize_(model, bits)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, paretoq.QuantLinear):
                m.alpha.mul_(1.37)  # distinguishable from the init
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf)
    assert any(k.endswith("q_proj.alpha") for k in state)
    fresh = paretoq.quantize_(_model(seed=2), bits)
    fresh.load_state_dict(state)
    x = _tokens(3)
    with torch.no_grad():
        assert torch.equal(fresh(x).logits, model(x).logits)
    for (n, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters()):
        assert torch.equal(a, b), n


def test_official_weight_clip_val_keys_load_into_alpha():
    model = paretoq.quantize_(_model(seed=1), 2)
    state = {  # an official checkpoint: weight_clip_val, no _extra_state format tag
        k.replace(".alpha", ".weight_clip_val"): v * 0.5
        for k, v in model.state_dict().items()
        if not k.endswith("_extra_state")
    }
    fresh = paretoq.quantize_(_model(seed=1), 2)
    fresh.load_state_dict(state)
    assert torch.equal(
        fresh.model.layers[1].mlp.up_proj.alpha, model.model.layers[1].mlp.up_proj.alpha * 0.5
    )


@pytest.mark.parametrize("bits", BITS)
def test_pack_gives_the_same_logits(bits):
    model = _model(seed=3)
    paretoq.quantize_(model, bits)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = _tokens(4)
    for _ in range(3):  # a few QAT steps so α and W are no longer at their init
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        before = model(x).logits
        paretoq.pack_(model, backend="torch")
        after = model(x).logits
    assert not any(isinstance(m, paretoq.QuantLinear) for m in model.modules())
    assert sum(isinstance(m, paretoq.PackedLinear) for m in model.modules()) == 14
    assert_close(after, before, rtol=1e-5)
    # The packed state dict holds int32 words, no latent FP weights of the projections.
    state = model.state_dict()
    assert state["model.layers.0.self_attn.q_proj.qweight"].dtype == torch.int32
    assert "model.layers.0.self_attn.q_proj.weight" not in state


def test_model_size_bits_of_packed_two_bit_model():
    model = tiny_llama(tiny_llama_config(hidden_size=64, num_layers=2, num_heads=2))
    quant_numel = (
        sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
        - model.lm_head.weight.numel()
    )
    other = sum(p.numel() for p in model.parameters()) - quant_numel  # tied head counted once
    paretoq.quantize_(model, 2)
    n_rows = sum(m.out_features for m in model.modules() if isinstance(m, paretoq.QuantLinear))
    arithmetic = quant_numel * 2 + 16 * (n_rows + other)
    assert paretoq.model_size_bits(model) == arithmetic  # QuantLinear: the arithmetic count
    paretoq.pack_(model)
    packed = paretoq.model_size_bits(model)
    assert abs(packed - arithmetic) / arithmetic < 0.05
    fp16 = paretoq.model_size_bits(_model())
    assert fp16 == 16 * sum(p.numel() for p in _model().parameters())


def test_model_size_bits_ternary_counts_log2_3():
    lin = nn.Sequential(nn.Linear(30, 10, bias=False))
    paretoq.quantize_(lin, 1.58)
    assert paretoq.model_size_bits(lin) == pytest.approx(300 * 1.5849625007211562 + 16 * 10)
    paretoq.pack_(lin)
    # 2-bit planes: K = 30 padded to 32 → 2 words per row; base 3: 6 bytes per row.
    assert paretoq.model_size_bits(lin) == 10 * 2 * 32 + 16 * 10
    assert paretoq.model_size_bits(lin, ternary_base3=True) == 10 * 6 * 8 + 16 * 10


def test_pack_without_quant_linear_raises():
    with pytest.raises(ValueError, match="no QuantLinear"):
        paretoq.pack_(_model())
    with pytest.raises(ValueError, match="no QuantLinear"):
        paretoq.pack_(paretoq.quantize_(_model(), 16))
    with pytest.raises(TypeError, match="model"):
        paretoq.pack_("model")


def test_quant_linear_bad_input():
    with pytest.raises(ValueError, match="bits"):
        paretoq.QuantLinear(4, 3, bits=7)
    with pytest.raises(TypeError, match="linear"):
        paretoq.QuantLinear.from_linear(nn.Conv1d(3, 3, 1), 2)
    q = paretoq.QuantLinear(4, 3, bits=2)
    q.alpha = nn.Parameter(torch.ones(1, 1))
    with pytest.raises(ValueError, match=r"alpha: expected shape \(3, 1\)"):
        paretoq.PackedLinear.from_quant_linear(q)


def _packed(bits, seed=3):
    model = paretoq.quantize_(_model(seed=seed), bits)
    return paretoq.pack_(model, backend="torch")


def test_packed_state_dict_records_bits_and_format():
    state = _packed(2).state_dict()
    tag = state["model.layers.0.self_attn.q_proj._extra_state"]
    assert tag["bits"] == 2 and tag["format"] == paretoq.modules.PACKED_FORMAT
    assert tag["in_features"] == 32 and tag["out_features"] == 32
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    fresh = _packed(2, seed=4)
    fresh.load_state_dict(torch.load(buf, weights_only=True))  # plain types: weights_only loads
    x = _tokens(5)
    with torch.no_grad():
        assert torch.equal(fresh(x).logits, _packed(2)(x).logits)


def test_two_bit_packed_checkpoint_is_refused_by_a_ternary_model():
    """Same buffer shapes (one 2-bit plane each), so only the format tag can tell them apart."""
    two = _packed(2).state_dict()
    ternary = _packed(1.58, seed=4)
    shapes = {k: v.shape for k, v in ternary.state_dict().items() if isinstance(v, torch.Tensor)}
    assert shapes == {k: v.shape for k, v in two.items() if isinstance(v, torch.Tensor)}
    q = ternary.model.layers[0].self_attn.q_proj
    before = q.qweight.clone()
    assert not torch.equal(before, two["model.layers.0.self_attn.q_proj.qweight"])
    with pytest.raises(ValueError, match=r"q_proj\._extra_state.*2-bit weights.*1\.58-bit"):
        ternary.load_state_dict(two)
    assert torch.equal(q.qweight, before)  # refused before its buffers were copied
    untagged = {k: v for k, v in two.items() if not k.endswith("_extra_state")}
    with pytest.raises(RuntimeError, match="_extra_state"):  # strict: the tag is required
        ternary.load_state_dict(untagged)


def test_packed_checkpoint_of_other_in_features_or_format_is_refused():
    lin = nn.Linear(40, 8, bias=False)  # K = 40 pads to 64, like K = 50
    p40 = paretoq.PackedLinear.from_quant_linear(paretoq.QuantLinear.from_linear(lin, 4))
    p50 = paretoq.PackedLinear.from_quant_linear(
        paretoq.QuantLinear.from_linear(nn.Linear(50, 8, bias=False), 4)
    )
    assert p40.qweight.shape == p50.qweight.shape
    with pytest.raises(ValueError, match="in_features=40"):
        p50.load_state_dict(p40.state_dict())
    bad = dict(p40.state_dict())
    bad["_extra_state"] = {**bad["_extra_state"], "version": 99}
    with pytest.raises(ValueError, match="format"):
        p40.load_state_dict(bad)


def test_quant_linear_checkpoint_of_other_bits_is_refused():
    two = paretoq.quantize_(_model(seed=1), 2).state_dict()
    ternary = paretoq.quantize_(_model(seed=1), 1.58)
    with pytest.raises(ValueError, match=r"2-bit weights.*1\.58-bit"):
        ternary.load_state_dict(two)
