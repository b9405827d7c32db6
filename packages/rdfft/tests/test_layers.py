"""Block-circulant layers: backends agree, gradcheck, merge, apply_bca, saved bytes, errors."""

import pytest
import rdfft
import torch
from rdfft import BCAdapter, BlockCirculantLinear, apply_bca, bca_parameter_groups
from rdfft.layers import block_circulant_matmul
from rdfft.reference import block_circulant_dense
from torch import nn

from neurips25_core.models import tiny_llama, tiny_llama_config
from neurips25_core.testing import assert_close, randn


@pytest.mark.parametrize("backend", ["rdfft", "rfft", "dense"])
def test_gradcheck_float64(backend):
    layer = BlockCirculantLinear(
        8, 4, block_size=4, backend=backend, bias=True, dtype=torch.float64
    )
    x = randn(3, 8, dtype=torch.float64, seed=1).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda inp, c, b: torch.func.functional_call(layer, {"c": c, "bias": b}, (inp,)),
        (
            x,
            layer.c.detach().clone().requires_grad_(),
            layer.bias.detach().clone().requires_grad_(),
        ),
    )


def test_dense_circulant_is_circular_convolution():
    c = randn(1, 1, 8, dtype=torch.float64, seed=3)
    x = randn(8, dtype=torch.float64, seed=4)
    conv = torch.fft.irfft(torch.fft.rfft(c[0, 0]) * torch.fft.rfft(x), n=8)
    assert_close(block_circulant_dense(c) @ x, conv, rtol=1e-14)


@pytest.mark.parametrize("shape", [(5, 96), (2, 3, 96)])
def test_backends_agree_fp32(shape):
    torch.manual_seed(0)
    c = (0.3 * torch.randn(2, 3, 32)).requires_grad_()
    x = randn(*shape, seed=2).requires_grad_()
    g = randn(*shape[:-1], 64, seed=3)
    outs, grads = {}, {}
    for backend in ("dense", "rfft", "rdfft"):
        y = block_circulant_matmul(x, c, backend)
        gx, gc = torch.autograd.grad(y, (x, c), g)
        outs[backend], grads[backend] = y, (gx, gc)
    for backend in ("rfft", "rdfft"):
        assert_close(outs[backend], outs["dense"], rtol=1e-5)
        assert_close(grads[backend][0], grads["dense"][0], rtol=1e-5)
        assert_close(grads[backend][1], grads["dense"][1], rtol=1e-5)


def test_rdfft_backend_saves_only_the_halfcomplex_input_and_p():
    c = torch.randn(2, 3, 32, requires_grad=True)
    x = torch.randn(7, 96, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        block_circulant_matmul(x, c, "rdfft")
    assert sorted(t.numel() for t in saved) == sorted([7 * 96, c.numel()])


def test_overwrite_input_turns_x_into_its_spectrum():
    base = nn.Linear(64, 32, bias=False)
    ad = BCAdapter(base, 16, overwrite_input=True)
    with torch.no_grad():
        ad.c.normal_()
    x = torch.randn(4, 64)
    keep = x.clone()
    ptr = x.data_ptr()
    y = ad(x)
    assert_close(y, base(keep) + keep @ block_circulant_dense(ad.c.detach()).T, rtol=1e-5)
    assert x.data_ptr() == ptr
    assert_close(x, rdfft.rdfft(keep.view(4, 4, 16)).view(4, 64), rtol=1e-6)


def test_adapter_zero_init_merge_and_lr_groups():
    torch.manual_seed(0)
    base = nn.Linear(64, 32)
    ad = BCAdapter(base, block_size=8)
    x = torch.randn(6, 64)
    assert torch.equal(ad(x), base(x))
    assert not base.weight.requires_grad and ad.c.requires_grad
    with torch.no_grad():
        ad.c.normal_()
    merged = ad.merged_linear()
    assert_close(merged(x), ad(x), rtol=1e-5)
    assert_close(ad.merge(), block_circulant_dense(ad.c.detach()), rtol=0)
    groups = bca_parameter_groups(nn.Sequential(ad), lr=0.1)
    assert len(groups) == 1 and groups[0]["lr"] == pytest.approx(0.1 / 8)


def test_apply_bca_on_a_transformers_llama():
    model = tiny_llama(tiny_llama_config(hidden_size=64, num_layers=1, num_heads=2), seed=0)
    x = torch.randint(0, 256, (2, 16))
    before = model(x).logits
    apply_bca(model, ("q_proj", "v_proj"), block_size=32)
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.q_proj, BCAdapter) and isinstance(attn.v_proj, BCAdapter)
    assert isinstance(attn.k_proj, nn.Linear)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["model.layers.0.self_attn.q_proj.c", "model.layers.0.self_attn.v_proj.c"]
    assert torch.equal(model(x).logits, before)
    model(x).logits.square().mean().backward()
    assert attn.q_proj.c.grad is not None and attn.q_proj.c.grad.abs().sum() > 0


def test_errors():
    with pytest.raises(ValueError, match=r"block_size: expected a power of two >= 2, got 12"):
        BlockCirculantLinear(24, 24, 12)
    with pytest.raises(ValueError, match=r"block_size: 16 does not divide in_features=24"):
        BlockCirculantLinear(24, 32, 16)
    with pytest.raises(ValueError, match=r"block_size: 8 does not divide out_features=12"):
        BCAdapter(nn.Linear(16, 12), 8)
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        BlockCirculantLinear(16, 16, 8, backend="fft")
    with pytest.raises(TypeError, match=r"base: expected an nn.Linear"):
        BCAdapter(nn.Conv1d(4, 4, 1), 2)
    with pytest.raises(
        ValueError, match=r"target_modules: \('query',\) matched no nn.Linear.*q_proj"
    ):
        apply_bca(
            tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2)), ["query"]
        )
    with pytest.raises(ValueError, match=r"x: expected last dim q_in·p = 16, got 12"):
        block_circulant_matmul(torch.zeros(2, 12), torch.zeros(1, 2, 8))


def _two_readers(share: bool):
    """q and v adapters reading one hidden state, as in a Llama attention block."""
    torch.manual_seed(0)
    model = nn.ModuleDict({"q_proj": nn.Linear(64, 64), "v_proj": nn.Linear(64, 32)})
    apply_bca(model, block_size=16, share_spectra=share)
    with torch.no_grad():
        for m in model.values():
            m.c.normal_()
    return model


def test_shared_spectrum_keeps_one_x_and_the_same_gradients():
    grads, saved_counts = {}, {}
    for share in (False, True):
        model = _two_readers(share)
        assert (model["q_proj"].spectrum_cache is not None) == share
        if share:
            assert model["q_proj"].spectrum_cache is model["v_proj"].spectrum_cache
        x = randn(5, 3, 64, seed=2).requires_grad_()
        h = x * 2.0  # a non-leaf input, as the normed hidden state is
        storages = set()

        def pack(t, storages=storages):
            storages.add((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model["q_proj"](h).sum() + model["v_proj"](h).square().sum()
        out.backward()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        spectrum = 5 * 3 * 64 * 4  # X of (5, 3) rows of 64 fp32
        saved_counts[share] = sum(n for ptr, n in storages if ptr not in params and n == spectrum)
        grads[share] = [x.grad] + [model[k].c.grad for k in ("q_proj", "v_proj")]
    for a, b in zip(grads[True], grads[False]):
        assert_close(a, b, rtol=1e-6)
    # unshared: two 5·3·64 fp32 spectra (3840 B each); shared: one
    assert saved_counts[False] == 2 * 5 * 3 * 64 * 4
    assert saved_counts[True] == 5 * 3 * 64 * 4


def test_shared_spectrum_misses_on_a_changed_or_other_input():
    model = _two_readers(True)
    cache = model["q_proj"].spectrum_cache
    x = randn(4, 64, seed=3)
    ref_v = model["v_proj"].base(x) + x @ model["v_proj"].merge().T
    model["q_proj"](x)
    assert len(cache) == 1
    x.mul_(2)  # in-place change after q read it: v must not reuse the stale spectrum
    assert_close(model["v_proj"](x), 2 * ref_v - model["v_proj"].base.bias, rtol=1e-5)
    y = x.clone()
    assert_close(model["v_proj"](y), model["v_proj"](x), rtol=0)
    del x, y
    assert len(cache) == 0  # entries die with their input
    import copy
    import pickle

    assert len(copy.deepcopy(model)["q_proj"].spectrum_cache) == 0
    assert pickle.loads(pickle.dumps(cache)) is not cache
    with pytest.raises(ValueError, match=r"spectrum_cache: only the 'rdfft' backend"):
        BCAdapter(nn.Linear(16, 16), 8, backend="rfft", spectrum_cache=rdfft.SpectrumCache())
