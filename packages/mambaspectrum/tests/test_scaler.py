import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mambaspectrum import (
    Scaler,
    calibrate_spsa,
    patch_fast_forward,
    selective_scan_ref,
    spectrum,
    spsa,
    state_bound,
    state_norms,
    unpatch_fast_forward,
)
from transformers import Mamba2Config, Mamba2ForCausalLM, MambaConfig, MambaForCausalLM

from neurips25_core.testing import assert_close


def tiny_mamba(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    cfg = MambaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=3, state_size=4, expand=2)
    return MambaForCausalLM(cfg).to(dtype).eval()


def tiny_mamba2(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    cfg = Mamba2Config(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=2,
        state_size=8,
        num_heads=4,
        head_dim=8,
        n_groups=1,
        expand=2,
        chunk_size=8,
    )
    return Mamba2ForCausalLM(cfg).to(dtype).eval()


IDS = torch.randint(0, 32, (2, 21), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("mode", ["spectrum", "a_linear", "delta"])
def test_unit_scale_is_bit_identical_and_reset_is_exact(mode):
    model = tiny_mamba()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        ref = model(IDS).logits
    scaler = Scaler(model, mode=mode)
    scaler.set(torch.ones(3))
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, ref)
    g = torch.Generator().manual_seed(1)
    for _ in range(100):
        scaler.set(torch.rand(3, generator=g) + 0.05)
    scaler.reset()
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_spectrum_map_and_discrete_eigenvalues():
    model = tiny_mamba(torch.float64)
    a0 = spectrum(model)
    s = torch.tensor([0.3, 0.7, 1.0])
    with Scaler(model, mode="spectrum") as scaler:
        scaler.set(s)
        for i, a in enumerate(spectrum(model)):
            assert_close(a.double(), a0[i].double() ** float(s[i]), rtol=1e-6)
            assert_close(
                torch.exp(-a.double()), torch.exp(-(a0[i].double() ** float(s[i]))), rtol=1e-6
            )
    with Scaler(model, mode="a_linear") as scaler:
        scaler.set(s)
        for i, a in enumerate(spectrum(model)):
            assert_close(a.double(), a0[i].double() * float(s[i]), rtol=1e-6)


def dt_scaled_forward(model, ids, scales):
    """HF's own forward with delta multiplied by s after softplus (the MambaExtend definition)."""
    import transformers.models.mamba.modeling_mamba as mm

    original = mm.mamba_selective_scan
    handles = []
    state = {}

    def wrapped(hidden, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, **kw):
        delta = F.softplus(dt + delta_bias[..., None]) * state["s"]
        return original(hidden, delta, A, B, C, D=D, z=z, **kw)

    for i, layer in enumerate(model.backbone.layers):
        handles.append(
            layer.mixer.register_forward_pre_hook(
                lambda m, a, i=i: state.__setitem__("s", float(scales[i]))
            )
        )
    mm.mamba_selective_scan = wrapped
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        mm.mamba_selective_scan = original
        for h in handles:
            h.remove()


def test_delta_reparametrisation_equals_dt_times_s_float64():
    model = tiny_mamba(torch.float64)
    s = torch.tensor([0.5, 1.7, 0.9])
    expected = dt_scaled_forward(model, IDS, s)
    with Scaler(model, mode="delta") as scaler:
        scaler.set(s)
        with torch.no_grad():
            got = model(IDS).logits
    assert_close(got, expected, rtol=1e-10)


def _count_scans(monkeypatch):
    import mambaspectrum.scaler as scaler_module

    calls = []
    real = scaler_module.selective_scan

    def counting(*args, **kwargs):
        calls.append(kwargs.get("backend", "auto"))
        return real(*args, **kwargs)

    monkeypatch.setattr(scaler_module, "selective_scan", counting)
    return calls


def test_reference_and_chunked_scan_match_hf_slow_path(monkeypatch):
    calls = _count_scans(monkeypatch)
    model = tiny_mamba(torch.float64)
    with torch.no_grad():
        hf = model(IDS, use_cache=False).logits
        assert calls == []
        patch_fast_forward(model, backend="reference")
        ref = model(IDS, use_cache=False).logits
        patch_fast_forward(model, backend="chunked")
        chunked = model(IDS, use_cache=False).logits
        unpatch_fast_forward(model)
        again = model(IDS, use_cache=False).logits
    # the patched forwards really ran this package's scans (3 layers each), not HF's path
    assert calls == ["reference"] * 3 + ["chunked"] * 3
    assert_close(ref, hf, rtol=1e-10)
    assert_close(chunked, hf, rtol=1e-10)
    assert torch.equal(again, hf)


def test_evaluation_and_calibration_run_through_the_patched_scan(monkeypatch):
    # an eval-mode forward builds a cache unless use_cache=False, and a forward with a cache
    # keeps HF's slow path: sequence_nll, state_norms and passkey must ask for no cache
    from mambaspectrum.calibrate import sequence_nll

    calls = _count_scans(monkeypatch)
    model = patch_fast_forward(tiny_mamba())
    sequence_nll(model, IDS)
    assert calls == ["chunked"] * 3
    state_norms(model, IDS, [5, 21])
    assert len(calls) >= 6


def test_patched_forward_trains_with_gradients():
    model = patch_fast_forward(tiny_mamba())
    model.train()
    loss = model(IDS, labels=IDS).loss
    loss.backward()
    assert model.backbone.layers[0].mixer.A_log.grad is not None
    assert torch.isfinite(model.backbone.layers[0].mixer.A_log.grad).all()


@pytest.mark.parametrize(
    ("factory", "mode"),
    [
        (tiny_mamba, "spectrum"),
        (tiny_mamba2, "spectrum"),
        (tiny_mamba, "delta"),
        (tiny_mamba2, "delta"),
    ],
)
def test_prefill_plus_decode_equals_full_forward_on_scaled_model(factory, mode):
    model = factory()
    scaler = Scaler(model, mode=mode)
    scaler.set(torch.linspace(0.4, 0.8, scaler.num_layers))
    ids = IDS[:1, :12]
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :8], use_cache=True)
        steps = [out.logits]
        cache = out.cache_params if hasattr(out, "cache_params") else out.past_key_values
        for t in range(8, 12):
            o = model(
                ids[:, t : t + 1],
                cache_params=cache,
                use_cache=True,
                cache_position=torch.tensor([t]),
            )
            cache = o.cache_params if hasattr(o, "cache_params") else o.past_key_values
            steps.append(o.logits)
    assert_close(torch.cat(steps, 1), full, rtol=1e-5)
    # prefill_only reproduces the official step(), which ignores the scale: decoding then differs.
    official = Scaler(model, mode=mode, prefill_only=True)
    scaler.reset()
    official.set(torch.linspace(0.4, 0.8, scaler.num_layers))
    with torch.no_grad():
        out = model(ids[:, :8], use_cache=True)
        cache = out.cache_params if hasattr(out, "cache_params") else out.past_key_values
        o = model(ids[:, 8:9], cache_params=cache, use_cache=True, cache_position=torch.tensor([8]))
    assert not torch.allclose(o.logits[:, 0], full[:, 8], atol=1e-6)
    official.reset()


def test_state_bound_and_convergence_speed():
    M, delta = 1.0, 0.2
    steps_to_90 = []
    for a in (0.25, 1.0, 4.0):
        A = -torch.full((1, 1), a, dtype=torch.float64)
        length = 400
        u = torch.ones(1, 1, length, dtype=torch.float64)
        d = torch.full((1, 1, length), delta, dtype=torch.float64)
        B = torch.full((1, 1, length), M / delta, dtype=torch.float64)
        C = torch.ones(1, 1, length, dtype=torch.float64)
        h = selective_scan_ref(u, d, A, B, C)[0, 0]
        bound = state_bound(M, a, delta)
        assert float(h.abs().max()) <= bound + 1e-12
        steps_to_90.append(int((h >= 0.9 * float(h[-1])).nonzero()[0]))
    assert steps_to_90[0] > steps_to_90[1] > steps_to_90[2]


def test_spsa_converges_is_deterministic_and_clips():
    target = np.array([0.2, 0.5, 0.8])
    f = lambda t: float(((t - target) ** 2).sum())  # noqa: E731
    r1 = spsa(f, 3, iters=300, a0=0.5, seed=3)
    r2 = spsa(f, 3, iters=300, a0=0.5, seed=3)
    assert np.abs(r1.scales.numpy() - target).max() < 0.05
    assert torch.equal(r1.scales, r2.scales)
    r3 = spsa(lambda t: float(((t - 5.0) ** 2).sum()), 3, iters=50, a0=0.5, clip=(0.01, 1.0))
    assert float(r3.scales.max()) <= 1.0 and float(r3.scales.min()) >= 0.01


def test_calibrate_spsa_on_model_keeps_best_and_is_seeded():
    model = tiny_mamba()
    calib = IDS
    results = []
    for _ in range(2):
        scaler = Scaler(model, mode="spectrum")
        res = calibrate_spsa(model, calib, scaler, iters=3, seed=5)
        assert res.loss <= res.initial_loss
        assert torch.equal(scaler.scales, res.scales)
        results.append(res.scales)
        scaler.reset()
    assert torch.equal(results[0], results[1])


def test_state_norms_shape():
    norms = state_norms(tiny_mamba(), IDS, [5, 10, 20])
    assert len(norms["max"]) == 3 and len(norms["max"][0]) == 3
    assert all(lo <= hi for lo, hi in zip(norms["min"][0], norms["max"][0], strict=True))


def test_bad_inputs_are_refused_before_anything_changes():
    model = tiny_mamba()
    with pytest.raises(TypeError, match="model"):
        Scaler(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="mode"):
        Scaler(model, mode="ntk")
    with pytest.raises(ValueError, match="granularity"):
        Scaler(model, granularity="channel")
    with pytest.raises(ValueError, match="granularity"):
        Scaler(model, mode="delta", granularity="element")
    with pytest.raises(ValueError, match="mode"):
        Scaler(tiny_mamba2(), mode="delta").scaled_parameters(torch.ones(2))
    scaler = Scaler(model)
    before = model.backbone.layers[0].mixer.A_log.clone()
    for bad in (
        [1.0, 1.0],
        [1.0, 0.0, 1.0],
        [1.0, -1.0, 1.0],
        [1.0, math.nan, 1.0],
        [1.0, math.inf, 1.0],
    ):
        with pytest.raises(ValueError, match="scales"):
            scaler.set(bad)
    assert torch.equal(model.backbone.layers[0].mixer.A_log, before)
    elem = Scaler(model, granularity="element")
    assert elem.shape == (3, 32, 4)
    with pytest.raises(ValueError, match="calib_ids"):
        calibrate_spsa(model, IDS.float(), scaler)
    with pytest.raises(ValueError, match="calib_ids"):
        calibrate_spsa(model, IDS[0], scaler)
    with pytest.raises(ValueError, match="objective"):
        calibrate_spsa(model, IDS, scaler, objective="bpb")


@pytest.mark.parametrize("mode", ["spectrum", "a_linear", "delta"])
def test_scales_change_the_model(mode):
    model = tiny_mamba()
    with torch.no_grad():
        ref = model(IDS).logits
        with Scaler(model, mode=mode) as scaler:
            scaler.set(torch.full((3,), 0.3))
            assert not torch.allclose(model(IDS).logits, ref, atol=1e-5)


def mamba2_dt_scaled_forward(model, ids, scales):
    """transformers' own Mamba-2 forward with dt multiplied by s after softplus and the clamp."""
    import transformers.models.mamba2.modeling_mamba2 as mm

    original = mm.mamba2_chunk_scan
    state = {}

    def wrapped(x, dt, A, B, C, chunk_size, D=None, dt_bias=None, dt_softplus=False, **kw):
        limit = kw.pop("dt_limit")
        dt = torch.clamp(F.softplus(dt + dt_bias), *limit) * state["s"]
        return original(x, dt, A, B, C, chunk_size, D=D, **kw)

    handles = [
        layer.mixer.register_forward_pre_hook(
            lambda m, a, i=i: state.__setitem__("s", scales[i].to(torch.float64))
        )
        for i, layer in enumerate(model.backbone.layers)
    ]
    mm.mamba2_chunk_scan = wrapped
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        mm.mamba2_chunk_scan = original
        for h in handles:
            h.remove()


def test_mamba2_delta_equals_dt_times_s_float64():
    """MambaExtend on Mamba-2: the patched forward equals transformers' forward with dt * s."""
    model = tiny_mamba2(dtype=torch.float64)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        plain = model(IDS).logits
    g = torch.Generator().manual_seed(2)
    per_head = Scaler(model, mode="delta", granularity="element")
    s_head = torch.rand(per_head.shape, generator=g) * 1.5 + 0.2
    expected = mamba2_dt_scaled_forward(model, IDS, s_head)
    per_head.set(s_head)
    with torch.no_grad():
        assert_close(model(IDS).logits, expected, rtol=1e-10)
    per_head.reset()
    scaler = Scaler(model, mode="delta")
    s = torch.tensor([0.4, 1.6], dtype=torch.float64)
    # with a finite limit on the time step, the clamp comes before the scale
    for layer in model.backbone.layers:
        layer.mixer.time_step_limit = (0.0, 0.05)
    expected = mamba2_dt_scaled_forward(model, IDS, s)
    scaler.set(s)
    with torch.no_grad():
        got = model(IDS).logits
    assert_close(got, expected, rtol=1e-10)
    assert not torch.allclose(got, plain, atol=1e-6)
    for layer in model.backbone.layers:
        layer.mixer.time_step_limit = (0.0, math.inf)
    # s = 1 is transformers' forward bit for bit; reset restores weights and forwards
    scaler.set(torch.ones(scaler.shape))
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, plain)
    for _ in range(100):
        scaler.set(s)
    scaler.reset()
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, plain)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all("_mambaspectrum_dt_scale" not in vars(b.mixer) for b in model.backbone.layers)
