"""NanoAdam against torch Adam/AdamW, the dense masked reference, and the selection reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoadam import NanoAdam, masked_adam_reference, param_groups, select_indices, select_reference

from neurips25_core.testing import assert_close, randn


def _pair(shape, dtype=torch.float64, seed=0):
    w = randn(*shape, seed=seed, dtype=dtype)
    return torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_density_one_equals_adam(wd):
    p, q = _pair((7, 13))
    opt = NanoAdam([p], lr=1e-2, density=1.0, weight_decay=wd, chunk_size=10, mask_interval=3)
    ref = (torch.optim.AdamW if wd else torch.optim.Adam)([q], lr=1e-2, weight_decay=wd)
    for t in range(50):
        g = randn(7, 13, seed=100 + t, dtype=torch.float64)
        p.grad, q.grad = g.clone(), g.clone()
        opt.step(), ref.step()
    assert_close(p.detach(), q.detach(), rtol=1e-12)


def _numpy_bottom_k(x: np.ndarray, k: float, c: int) -> np.ndarray:
    out = []
    for s in range(0, x.size, c):
        ch = x[s : s + c]
        n = int(np.ceil(k * ch.size - 1e-12))
        out.extend(s + np.argsort(ch, kind="stable")[:n])
    return np.sort(np.array(out, dtype=np.int64))


@pytest.mark.parametrize(
    ("n", "k", "c"), [(1000, 0.1, 64), (997, 0.04, 100), (50, 0.3, None), (5, 0.1, 5)]
)
def test_selection_matches_numpy(n, k, c):
    x = randn(n, seed=n).abs()
    x[::7] = x[3]  # many ties
    got = select_indices(x, k, c)
    want = _numpy_bottom_k(x.numpy(), k, c or n)
    np.testing.assert_array_equal(got.numpy(), want)
    assert torch.equal(got, select_reference(x, k, c))
    cc = c or n
    assert got.numel() == sum(int(np.ceil(k * min(cc, n - s) - 1e-12)) for s in range(0, n, cc))


def test_five_entry_chunk_and_zeros_first():
    x = torch.tensor([3.0, 1.0, 0.0, 2.0, 0.5])
    assert select_indices(x.abs(), 0.1, 5).tolist() == [2]
    x = torch.tensor([0.0, -0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 4.0, 5.0, 6.0])
    assert select_indices(x.abs(), 0.4, None).tolist() == [0, 1, 3, 5]


def test_unselected_bit_identical_and_refresh_cadence():
    p = torch.nn.Parameter(randn(40, 30, seed=1))
    opt = NanoAdam(
        [p],
        lr=1e-2,
        density=0.1,
        final_density=0.04,
        total_steps=30,
        mask_interval=7,
        density_interval=5,
        chunk_size=128,
    )
    prev_mask = None
    changes = []
    for t in range(30):
        before = p.detach().clone()
        p.grad = randn(40, 30, seed=200 + t)
        opt.step()
        mask = opt.mask(p)
        assert torch.equal(p.detach()[~mask], before[~mask]), t
        assert not torch.equal(p.detach()[mask], before[mask])
        if prev_mask is not None and not torch.equal(mask, prev_mask):
            changes.append(t)
        prev_mask = mask
        assert opt.param_groups[0]["current_density"] == pytest.approx(opt.density_at(t - t % 5))
    assert changes and all(t % 7 == 0 or t % 5 == 0 for t in changes)
    assert opt.density_at(30) == pytest.approx(0.04) and opt.density_at(15) == pytest.approx(0.07)


def _run_masks(opt, p, steps, seed):
    grads, masks = [], []
    for t in range(steps):
        g = randn(*p.shape, seed=seed + t, dtype=p.dtype)
        p.grad = g.clone()
        opt.step()
        grads.append(g)
        masks.append(opt.mask(p).clone())
    return grads, masks


@pytest.mark.parametrize("mode", ["remap", "reset"])
def test_matches_dense_masked_reference(mode):
    p = torch.nn.Parameter(randn(17, 11, seed=3, dtype=torch.float64) * 0.05)
    start = p.detach().clone()
    opt = NanoAdam(
        [p],
        lr=3e-2,
        density=0.2,
        final_density=0.1,
        total_steps=20,
        mask_interval=4,
        density_interval=6,
        chunk_size=37,
        state_on_refresh=mode,
    )
    grads, masks = _run_masks(opt, p, 20, 300)
    assert len({m.sum().item() for m in masks}) > 1  # the density really changed
    want = masked_adam_reference(start, grads, masks, lr=3e-2, mode=mode)
    assert_close(p.detach(), want, rtol=1e-12)


def test_newcomer_first_step_is_lr_times_g_over_g_plus_eps():
    """A fresh entry at a later global step moves by lr·|g|/(|g|+eps) (per-entry ages), not 3.16·lr."""
    p = torch.nn.Parameter(torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64))
    opt = NanoAdam([p], lr=1.5, density=0.25, mask_interval=1, chunk_size=None)
    p.grad = torch.full((4,), -3.0, dtype=torch.float64)
    opt.step()  # step 0 moves entry 0 from 0.0 to 1.5
    before = p.detach().clone()
    p.grad = torch.full((4,), -3.0, dtype=torch.float64)
    opt.step()  # entry 1 (1.0) is now the smallest: a newcomer
    assert opt.mask(p).tolist() == [False, True, False, False]
    assert int(opt.state[p]["age"][0]) == 1
    assert float(p[1] - before[1]) == pytest.approx(1.5 * 3.0 / (3.0 + 1e-8), rel=1e-12)
    assert torch.equal(p.detach()[[0, 2, 3]], before[[0, 2, 3]])


def test_positional_keeps_slots():
    p = torch.nn.Parameter(randn(64, seed=5, dtype=torch.float64))
    opt = NanoAdam(
        [p], lr=0.5, density=0.25, mask_interval=2, chunk_size=None, state_on_refresh="positional"
    )
    p.grad = randn(64, seed=6, dtype=torch.float64)
    opt.step()
    opt.step()
    m_before = opt.state[p]["exp_avg"].clone()
    age_before = opt.state[p]["age"].clone()
    opt.step()  # t = 2: refresh; slot j keeps state j, then is updated
    assert torch.equal(opt.state[p]["age"], age_before + 1)
    g = p.grad.reshape(-1)[opt.state[p]["idx"].long()]
    assert_close(opt.state[p]["exp_avg"], 0.9 * m_before + 0.1 * g, rtol=1e-12)


def test_dense_group_equals_adamw():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
    model2 = torch.nn.Sequential(
        torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3)
    )
    model2.load_state_dict(model.state_dict())
    model.double(), model2.double()
    groups = param_groups(model, exclude=("2.",))
    groups[0]["lr"] = 0.0  # freeze the sparse group so both models see the same forward
    opt = NanoAdam(groups, lr=1e-2, weight_decay=0.01, density=0.2)
    dense_names = [
        n
        for n, _ in model2.named_parameters()
        if "2." in n or n.endswith("bias") or n.startswith("1.")
    ]
    ref = torch.optim.AdamW(
        [p for n, p in model2.named_parameters() if n in dense_names], lr=1e-2, weight_decay=0.01
    )
    x = randn(8, 6, seed=9, dtype=torch.float64)
    for _ in range(5):
        for m, o in ((model, opt), (model2, ref)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for (n, a), b in zip(model.named_parameters(), model2.parameters()):
        if n in dense_names:
            assert_close(a.detach(), b.detach(), rtol=1e-12)


def test_compact_state_and_bf16():
    p = torch.nn.Parameter(randn(100, 50, seed=2).bfloat16())
    opt = NanoAdam([p], lr=1e-3, density=0.04, chunk_size=1000)
    p.grad = randn(100, 50, seed=3).bfloat16()
    opt.step()
    st = opt.state[p]
    assert st["exp_avg"].dtype == torch.float32 and st["exp_avg"].numel() == 200
    assert st["idx"].dtype == torch.int32 and st["idx"].numel() == 200
    assert opt.state_bytes() == 200 * (4 + 4 + 4 + 4)
    assert opt.touched_fraction() == pytest.approx(0.04)


def test_int16_indices_equal_int32():
    outs = []
    for idt in (torch.int16, "auto"):
        p = torch.nn.Parameter(randn(30, 40, seed=4))
        opt = NanoAdam([p], lr=1e-2, density=0.1, chunk_size=256, index_dtype=idt, mask_interval=2)
        _run_masks(opt, p, 5, 50)
        outs.append(p.detach().clone())
    assert torch.equal(outs[0], outs[1])


def test_grad_none_skipped_and_criteria_run():
    a, b = torch.nn.Parameter(randn(20, 5, seed=1)), torch.nn.Parameter(randn(20, 5, seed=2))
    for crit in ("small_weight", "large_weight", "random", "large_grad"):
        opt = NanoAdam([a, b], lr=1e-2, density=0.1, criterion=crit)
        b0 = b.detach().clone()
        a0 = a.detach().clone()
        a.grad, b.grad = randn(20, 5, seed=3), None
        opt.step()
        assert torch.equal(b.detach(), b0) and b not in opt.state
        if crit == "large_weight":
            assert torch.equal(
                opt.mask(a).view(-1).nonzero().view(-1), select_indices(-a0.abs(), 0.1, 4096)
            )
