"""CodebookLinear and quantize_ on a transformers Llama built from a config."""

import io

import codegemm
import pytest
import torch
from codegemm import CodebookConfig, CodebookLinear
from codegemm.reference import codebook_matmul_reference

from neurips25_core.device import triton_usable
from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close, randn

FAST = {"kmeans_iters": 4, "refine_rounds": 1}


@pytest.fixture(scope="module")
def layer_pair():
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 48)
    q, result = codegemm.quantize_linear(linear, CodebookConfig.m2v8(**FAST), return_result=True)
    return linear, q, result


def test_backends_agree(layer_pair):
    _, q, _ = layer_pair
    x = randn(5, 256, seed=1)
    ref = codebook_matmul_reference(x, q.codes, q.codebooks, q.scales) + q.bias.double()
    for backend in ("auto", "psumbook", "dequant", "reference"):
        q.backend = backend
        assert_close(q(x), ref, rtol=2e-6, name=backend)
    q.backend = "auto"


def test_close_to_linear_within_reconstruction_error(layer_pair):
    linear, q, result = layer_pair
    x = randn(64, 256, seed=2)
    with torch.no_grad():
        err = ((q(x) - linear(x)).norm() / (linear(x) - linear.bias).norm()).item()
    assert err < 2 * result.error  # Gaussian inputs: output error tracks the weight error


def test_state_dict_round_trip_and_plan_invalidation(layer_pair):
    _, q, _ = layer_pair
    buf = io.BytesIO()
    torch.save(q.state_dict(), buf)
    fresh = CodebookLinear(256, 48, q.config)
    x = randn(3, 256, seed=3)
    y_before = fresh(x)  # builds a plan on the zero codes
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf))
    assert not torch.equal(fresh(x), y_before)
    assert torch.equal(fresh(x), q(x))


def test_gradients_reach_x_only(layer_pair):
    _, q, _ = layer_pair
    x = randn(2, 256, seed=4, requires_grad=True)
    q(x).square().sum().backward()
    w = q.dequantize()
    expected = 2 * q(x.detach()) @ w
    assert_close(x.grad, expected, rtol=2e-6)
    assert q.bias.grad is not None


def test_from_quantized_and_errors(layer_pair):
    _, q, _ = layer_pair
    again = CodebookLinear.from_quantized(q.codes, q.codebooks, q.scales, q.bias)
    assert again.config.num_codebooks == 2 and again.config.group_size == 128
    x = randn(2, 256, seed=5)
    assert torch.equal(again(x), q(x))
    with pytest.raises(ValueError, match="in_features"):
        CodebookLinear(100, 8, CodebookConfig.m1v4())
    with pytest.raises(ValueError, match="backend"):
        CodebookLinear(128, 8, CodebookConfig.m1v4(), backend="fast")
    with pytest.raises(ValueError, match="x"):
        q(randn(2, 128))


@pytest.fixture(scope="module")
def llama_pair():
    config = tiny_llama_config(hidden_size=128, num_layers=1, num_heads=4, intermediate_size=256)
    reference = tiny_llama(config, seed=0).eval()
    quantized = tiny_llama(config, seed=0).eval()
    report = codegemm.quantize_(quantized, CodebookConfig.m1v4(**FAST))
    return reference, quantized, report


def test_quantize_llama_swaps_linears_but_not_head(llama_pair):
    _, quantized, report = llama_pair
    names = set(report["quantized"])
    assert len(names) == 7 and not report["skipped"]
    assert isinstance(quantized.lm_head, torch.nn.Linear) and not isinstance(
        quantized.lm_head, CodebookLinear
    )
    assert isinstance(quantized.model.embed_tokens, torch.nn.Embedding)
    assert isinstance(quantized.model.layers[0].mlp.down_proj, CodebookLinear)


def test_quantized_llama_logits_match_dequantized_model(llama_pair):
    reference, quantized, _ = llama_pair
    # the "dequantized reference model": the fp32 model with every weight replaced by Ŵ
    dequantized = tiny_llama(reference.config, seed=0).eval()
    for name, module in quantized.named_modules():
        if isinstance(module, CodebookLinear):
            dequantized.get_submodule(name).weight.data.copy_(module.dequantize())
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = quantized(ids).logits
        deq = dequantized(ids).logits
        fp = reference(ids).logits
    assert_close(ours, deq, rtol=1e-5, name="logits")
    assert (ours - fp).norm() / fp.norm() < 0.5  # quantization noise, not garbage


def test_filter_fn_calibration_and_fit_group():
    config = tiny_llama_config(hidden_size=128, num_layers=1, num_heads=4, intermediate_size=352)
    model = tiny_llama(config, seed=1)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    report = codegemm.quantize_(
        model, CodebookConfig.m1v4(**FAST), filter_fn=lambda mod, fqn: "mlp" in fqn, calibration=ids
    )
    assert set(report["quantized"]) == {
        "model.layers.0.mlp.gate_proj",
        "model.layers.0.mlp.up_proj",
    }
    assert "model.layers.0.mlp.down_proj" in report["skipped"]  # K = 352 is not a multiple of 128
    assert not isinstance(model.model.layers[0].self_attn.q_proj, CodebookLinear)
    model2 = tiny_llama(config, seed=1)
    report2 = codegemm.quantize_(
        model2,
        CodebookConfig.m1v4(**FAST),
        filter_fn=lambda mod, fqn: "down" in fqn,
        fit_group_size=True,
    )
    assert report2["configs"]["model.layers.0.mlp.down_proj"].group_size == 88
    with pytest.raises(TypeError, match="config"):
        codegemm.quantize_(model2, None)


@pytest.mark.skipif(not triton_usable(), reason="Triton is not usable here")
def test_module_runs_triton_impl(layer_pair):
    _, q, _ = layer_pair
    small = CodebookLinear.from_quantized(
        q.codes[:16].clone(), q.codebooks, q.scales[:16].clone(), impl="triton", backend="psumbook"
    )
    x = randn(2, 256, seed=6)
    assert_close(small(x), codebook_matmul_reference(x, small.codes, small.codebooks, small.scales))


@pytest.fixture(scope="module")
def small_b4():
    """A 4-bit-codebook layer (C = 16): uint8 codes 16..255 are out of range."""
    torch.manual_seed(3)
    config = CodebookConfig(
        num_codebooks=2, vector_size=8, codebook_bits=4, kmeans_iters=2, refine_rounds=0
    )
    return codegemm.quantize_linear(torch.nn.Linear(256, 24), config)


def test_load_state_dict_refuses_out_of_range_codes(small_b4):
    state = {k: v.clone() for k, v in small_b4.state_dict().items()}
    state["codes"][3, 5, 1] = 200  # C = 16
    fresh = CodebookLinear(256, 24, small_b4.config)
    before = fresh.codes.clone()
    with pytest.raises(ValueError, match=r"state_dict\['codes'\].*values < C=16.*200"):
        fresh.load_state_dict(state)
    assert torch.equal(fresh.codes, before)  # refused before anything was copied
    # nested: the key of the submodule is named
    model = torch.nn.Sequential(CodebookLinear(256, 24, small_b4.config))
    with pytest.raises(ValueError, match=r"0\.codes"):
        model.load_state_dict({f"0.{k}": v for k, v in state.items()})


def test_load_state_dict_refuses_wrong_dtype_and_format(small_b4):
    state = dict(small_b4.state_dict())
    fresh = CodebookLinear(256, 24, small_b4.config)
    with pytest.raises(TypeError, match="uint8"):  # copy_ would wrap int64 codes silently
        fresh.load_state_dict({**state, "codes": state["codes"].long() + 256})
    other = CodebookLinear(256, 24, CodebookConfig.m1v4())
    with pytest.raises(ValueError, match="does not fit"):
        other.load_state_dict(state)


def test_codes_are_checked_once_per_change_not_per_call(small_b4, monkeypatch):
    import codegemm.modules as modules

    x = randn(2, 256, seed=9)
    expected = small_b4(x)
    calls = []
    real = modules.check_format
    monkeypatch.setattr(modules, "check_format", lambda *a, **k: calls.append(1) or real(*a, **k))
    fresh = CodebookLinear(256, 24, small_b4.config)
    fresh.load_state_dict(small_b4.state_dict())
    assert len(calls) == 1  # on load
    for _ in range(3):
        assert torch.equal(fresh(x), expected)
    assert len(calls) == 1  # never again while the codes stay the same
    with torch.no_grad():
        fresh.codes[0, 0, 0] = 17  # an in-place edit bumps the version: checked on the next call
    with pytest.raises(ValueError, match="values < C=16"):
        fresh(x)
    assert len(calls) == 2


def test_quantized_llama_forced_psumbook_matches_dequantized_model(llama_pair, monkeypatch):
    """48 tokens (auto would pick dequant): every layer forced onto the psumbook path."""
    import codegemm.ops as ops

    reference, quantized, _ = llama_pair
    dequantized = tiny_llama(reference.config, seed=0).eval()
    layers = {n: m for n, m in quantized.named_modules() if isinstance(m, CodebookLinear)}
    for name, module in layers.items():
        dequantized.get_submodule(name).weight.data.copy_(module.dequantize())
    seen = []
    real = ops._forward
    monkeypatch.setattr(ops, "_forward", lambda *a: seen.append(a[4]) or real(*a))
    for m in layers.values():
        monkeypatch.setattr(m, "backend", "psumbook")
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = quantized(ids).logits
        deq = dequantized(ids).logits
    assert seen == ["psumbook"] * len(layers)
    assert_close(ours, deq, rtol=1e-5, name="psumbook logits")
