"""mLSTMLayer and mLSTMLM: shapes, backends, state carrying and step-by-step generation."""

from __future__ import annotations

import pytest
import torch
from tfla import mLSTMLayer, mLSTMLM

from neurips25_core.device import triton_usable
from neurips25_core.testing import assert_close


@pytest.mark.parametrize(("variant", "normalize"), [("exp", True), ("sig", False), ("sig", True)])
def test_layer_state_carrying_matches_full_sequence(variant, normalize):
    torch.manual_seed(0)
    layer = mLSTMLayer(
        24,
        num_heads=2,
        qk_head_dim=8,
        v_head_dim=16,
        variant=variant,
        normalize=normalize,
        chunk_size=16,
    ).double()
    x = torch.randn(2, 29, 24, dtype=torch.float64)
    y_full = layer(x)
    y1, st = layer(x[:, :10], return_state=True)
    y2, _ = layer(x[:, 10:], state=st, return_state=True)
    assert_close(torch.cat([y1, y2], 1), y_full)


def test_layer_backends_agree():
    if not triton_usable():
        pytest.skip("needs triton with a GPU or TRITON_INTERPRET=1")
    torch.manual_seed(0)
    layer = mLSTMLayer(32, num_heads=2, chunk_size=16, backend="torch")
    x = torch.randn(1, 21, 32, requires_grad=True)
    y = layer(x)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    layer.backend = "triton"
    y_t = layer(x)
    (gx_t,) = torch.autograd.grad(y_t.square().sum(), x)
    assert_close(y_t, y, rtol=1e-5)
    assert_close(gx_t, gx, rtol=1e-5)


def test_layer_rejects_bad_input():
    with pytest.raises(ValueError, match="num_heads"):
        mLSTMLayer(30, num_heads=4)
    layer = mLSTMLayer(16, num_heads=2, chunk_size=16)
    with pytest.raises(ValueError, match="x: expected shape"):
        layer(torch.randn(2, 5, 8))


@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_lm_step_by_step_matches_full_forward(variant):
    torch.manual_seed(0)
    lm = mLSTMLM(
        d_model=32,
        num_layers=2,
        num_heads=2,
        variant=variant,
        normalize=variant == "exp",
        chunk_size=16,
    ).double()
    ids = torch.randint(0, 256, (2, 13))
    full = lm(ids)
    logits, states = lm(ids[:, :6], return_state=True)
    steps = [logits]
    for t in range(6, 13):
        logits, states = lm(ids[:, t : t + 1], states=states, return_state=True)
        steps.append(logits)
    assert_close(torch.cat(steps, 1), full)


def test_lm_generate_is_consistent_with_forward():
    torch.manual_seed(0)
    lm = mLSTMLM(d_model=32, num_layers=2, num_heads=2, chunk_size=16).double()
    prompt = torch.randint(0, 256, (1, 7))
    out = lm.generate(prompt, max_new_tokens=6)
    assert out.shape == (1, 13) and torch.equal(out[:, :7], prompt)
    logits = lm(out[:, :-1])
    assert torch.equal(logits[:, 6:].argmax(-1), out[:, 7:])


def test_lm_trains():
    torch.manual_seed(0)
    lm = mLSTMLM(d_model=16, num_layers=1, num_heads=2, chunk_size=16)
    opt = torch.optim.AdamW(lm.parameters(), lr=1e-2)
    ids = torch.randint(0, 16, (2, 17))
    losses = []
    for _ in range(15):
        loss = torch.nn.functional.cross_entropy(
            lm(ids[:, :-1]).reshape(-1, 256), ids[:, 1:].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("bad", [256, 1000, -1])
def test_lm_refuses_out_of_vocabulary_ids(bad):
    lm = mLSTMLM(d_model=16, num_layers=1, num_heads=2, chunk_size=16)
    ids = torch.tensor([[1, 2, bad]])
    with pytest.raises(
        ValueError, match=r"input_ids: expected ids in \[0, 256\) \(vocab_size=256\)"
    ):
        lm(ids)
    with pytest.raises(TypeError, match="input_ids: expected an int32/int64 tensor"):
        lm(ids.float())
    with pytest.raises(ValueError, match="states: expected one state per layer"):
        lm(ids.clamp(0, 255), states=[], return_state=True)
