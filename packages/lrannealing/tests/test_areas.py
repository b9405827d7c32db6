"""S₁/S₂: lfilter against the recursion, the double sum and the closed form; limits; warm-up."""

import numpy as np
import pytest
import torch
from lrannealing import areas, effective_lrs, s2_torch, schedules
from lrannealing import reference as ref


def _rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _adversarial(T):
    rng = np.random.default_rng(T)
    drop = np.full(T + 1, 1e-3)
    drop[T // 3 :] = 1e-5  # one sharp drop by 100x
    spikes = np.full(T + 1, 2e-4)
    spikes[rng.choice(T, 20)] = 5e-2  # isolated spikes up and back down
    zigzag = np.where(np.arange(T + 1) % 2 == 0, 1.0, 0.0)  # an increase every other step
    return {
        "random": rng.random(T + 1),
        "random_tiny": 1e-8 * rng.random(T + 1),
        "random_huge": 1e2 * rng.random(T + 1),
        "drop": drop,
        "spikes": spikes,
        "zigzag": zigzag,
        "zeros_then_peak": np.concatenate([np.zeros(T // 2), np.full(T + 1 - T // 2, 3e-3)]),
        "rewarm": schedules.rewarm(schedules.cosine(T, 3e-3), T // 2, 3e-3, warmup=7),
        "cyclic": schedules.cyclic(T, 1.0, cycles=5),
        "wsd_1sqrt": schedules.wsd(T, 3e-3, shape="1-sqrt", warmup=11),
    }


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.99, 0.999])
@pytest.mark.parametrize("T", [37, 600])
def test_s2_lfilter_matches_recursion_double_sum_closed_form(T, decay):
    for name, lrs in _adversarial(T).items():
        _, s2 = areas(lrs, decay)
        expect = ref.s2_recursion(lrs, decay)
        assert _rel(s2, expect) <= 1e-12, name
        assert _rel(s2, ref.s2_double_sum(lrs, decay)) <= 1e-12, name
        assert _rel(s2, ref.s2_closed_form(lrs, decay)) <= 1e-12, name


@pytest.mark.parametrize("T", [0, 1, 2])
def test_s2_on_the_shortest_schedules(T):
    lrs = np.random.default_rng(T).random(T + 1)
    for decay in (0.0, 0.999):
        s1, s2 = areas(lrs, decay)
        np.testing.assert_allclose(s2, ref.s2_closed_form(lrs, decay), rtol=1e-12, atol=1e-300)
        assert s1.shape == s2.shape == (T + 1,) and s2[0] == 0.0


def test_s2_identities_at_3000_steps():
    T = 3000
    for name in ("random", "drop", "zigzag", "rewarm"):
        lrs = _adversarial(T)[name]
        _, s2 = areas(lrs, 0.999)
        assert _rel(s2, ref.s2_recursion(lrs, 0.999)) <= 1e-12, name
        assert _rel(s2, ref.s2_closed_form(lrs, 0.999)) <= 1e-12, name
    lrs = _adversarial(1200)["random"]  # the O(T²) double sum on a shorter run
    assert _rel(areas(lrs, 0.999)[1], ref.s2_double_sum(lrs, 0.999)) <= 1e-12


def test_s1_matches_the_loop_with_and_without_step0():
    lrs = np.random.default_rng(0).random(101)
    assert _rel(areas(lrs)[0], ref.s1_loop(lrs)) <= 1e-14
    assert (
        _rel(areas(lrs, s1_include_step0=False)[0], ref.s1_loop(lrs, include_step0=False)) <= 1e-14
    )


def test_limits_of_decay():
    lrs = schedules.cosine(500, 3e-3, warmup=0) + 1e-4 * np.random.default_rng(1).random(501)
    _, s2_zero = areas(lrs, 0.0)
    np.testing.assert_allclose(s2_zero, lrs[0] - lrs, rtol=0, atol=1e-17)  # the total drop
    _, s2_one = areas(lrs, 1.0 - 1e-10)
    # the annealing area Σ (η₀ − η_i); the gap is O((1 − λ)·T)
    assert _rel(s2_one, ref.s2_limit_decay_one(lrs)) <= 1e-6


def test_constant_lr_has_no_annealing_area():
    eta = 2.5e-4
    s1, s2 = areas(schedules.constant(777, eta))
    assert np.all(s2 == 0.0)
    np.testing.assert_allclose(s1, eta * np.arange(1, 779), rtol=1e-14)


@pytest.mark.parametrize("decay", [0.9, 0.999])
def test_a_step_drop_follows_the_saturating_form(decay):
    T, k, drop = 2000, 700, 1.2e-3
    lrs = np.full(T + 1, 3e-3)
    lrs[k:] -= drop
    _, s2 = areas(lrs, decay)
    s = np.arange(T + 1)
    expect = np.where(s >= k, drop * (1 - decay ** (s - k + 1)) / (1 - decay), 0.0)
    np.testing.assert_allclose(s2, expect, rtol=1e-12, atol=1e-18)


def test_warmup_as_peak():
    T, w, peak = 400, 50, 3e-3
    lrs = schedules.wsd(T, peak, warmup=w)
    s1, s2 = areas(lrs, warmup_steps=w, warmup="as_peak")
    np.testing.assert_allclose(s1[:w], peak * np.arange(1, w + 1), rtol=1e-14)
    no_ramp = schedules.wsd(T, peak, warmup=0)
    np.testing.assert_allclose(s2, areas(no_ramp)[1], rtol=1e-12, atol=1e-18)  # ramp adds nothing
    np.testing.assert_allclose(effective_lrs(lrs, w), no_ramp, rtol=0)
    # "actual" sees the ramp: increases lower S₂ below 0 during warm-up
    _, s2_actual = areas(lrs, warmup_steps=w, warmup="actual")
    assert np.all(s2_actual[1:w] < 0)


@pytest.mark.parametrize(("dtype", "rtol"), [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_torch_chunked_scan_matches_lfilter(dtype, rtol):
    lrs = np.stack([_adversarial(1999)[n] for n in ("random", "drop", "rewarm", "wsd_1sqrt")])
    out = s2_torch(torch.from_numpy(lrs).to(dtype), 0.999, chunk=64)
    assert out.dtype == dtype and out.shape == lrs.shape
    for row, got in zip(lrs, out.double().numpy(), strict=True):
        assert _rel(got, areas(row, 0.999)[1]) <= rtol
    small = s2_torch(torch.tensor([1.0, 1.0, 0.5, 0.5], dtype=torch.float64), 0.0)
    assert small.tolist() == [0.0, 0.0, 0.5, 0.5]


def test_the_inverse_power_trick_overflows_in_float32_and_the_scan_does_not():
    """cumsum(Δ·λ^(−k))·λ^s overflows past k ≈ 8.8e4 at λ = 0.999 in fp32: it is forbidden here."""
    T, decay = 100_000, 0.999
    lrs = schedules.cosine(T, 3e-3).astype(np.float32)
    t = torch.from_numpy(lrs)
    delta = torch.zeros_like(t)
    delta[1:] = t[:-1] - t[1:]
    k = torch.arange(T + 1, dtype=torch.float32)
    trick = torch.cumsum(torch.cumsum(delta * decay ** (-k), 0) * decay**k, 0)
    assert not torch.isfinite(trick).all()
    scan = s2_torch(t, decay)
    assert torch.isfinite(scan).all()
    assert _rel(scan.double().numpy(), areas(lrs.astype(np.float64), decay)[1]) <= 1e-4
