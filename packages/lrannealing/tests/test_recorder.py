"""LossCurveRecorder: plain loop, EMA, the transformers callback, and DDP (two gloo processes)."""

import numpy as np
import pytest
import torch
from lrannealing import LossCurveRecorder

from neurips25_core.distributed import run_distributed


def test_plain_loop_records_a_curve():
    rec = LossCurveRecorder(source="val")
    for step in range(10):
        rec.record_lr(step, 1e-3 * (1 - step / 20))
        if step % 3 == 0:
            rec.record(step, None, torch.tensor(2.0 + 1 / (step + 1)))
    curve = rec.curve(name="run", warmup_steps=1)
    assert curve.steps.tolist() == [0, 3, 6, 9] and curve.source == "val"
    assert curve.lrs.shape == (10,) and curve.lrs[3] == pytest.approx(1e-3 * (1 - 3 / 20))
    assert curve.after(4).steps.tolist() == [6, 9]


def test_ema_is_bias_corrected_and_named():
    rec = LossCurveRecorder(ema=0.5, source="train")
    for step, loss in enumerate([4.0, 2.0, 2.0]):
        rec(step, 1e-3, loss)
    assert rec.losses[0] == pytest.approx(4.0)  # bias-corrected: the first value is the loss
    assert rec.losses[1] == pytest.approx((0.25 * 4 + 0.5 * 2) / 0.75)
    assert rec.curve().source == "train_ema" and rec.raw_losses == [4.0, 2.0, 2.0]


def test_bad_input():
    rec = LossCurveRecorder()
    with pytest.raises(ValueError, match="loss"):
        rec.record(0, 1e-3, float("nan"))
    with pytest.raises(ValueError, match="lr"):
        rec.record(0, -1.0, 1.0)
    with pytest.raises(ValueError, match="ema"):
        LossCurveRecorder(ema=1.0)
    rec.record(5, 1e-3, 1.0)
    with pytest.raises(ValueError, match="step"):
        rec.record(5, 1e-3, 1.0)
    with pytest.raises(ValueError, match="lrs"):
        rec.curve()  # steps 0..4 have no LR


@pytest.mark.slow  # importing transformers' Trainer machinery alone takes seconds
def test_transformers_callback_records_lr_per_step_and_logged_loss():
    from transformers import TrainerControl, TrainerState

    rec = LossCurveRecorder(source="train")
    callback = rec.trainer_callback()
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    state, control = TrainerState(), TrainerControl()
    for step in range(6):
        state.global_step = step
        opt.param_groups[0]["lr"] = 0.1 / (step + 1)
        callback.on_step_begin(None, state, control, optimizer=opt)
        state.global_step = step + 1
        if (step + 1) % 2 == 0:
            callback.on_log(
                None, state, control, logs={"loss": 3.0 - step * 0.1, "learning_rate": 0.0}
            )
    curve = rec.curve()
    assert curve.steps.tolist() == [2, 4, 6]
    np.testing.assert_allclose(curve.lrs[:6], [0.1 / (s + 1) for s in range(6)])
    assert curve.lrs.size == 7 and curve.lrs[6] == curve.lrs[5]  # the tail repeats the last LR
    np.testing.assert_allclose(curve.loss, [2.9, 2.7, 2.5])


def _train(rank, world_size, steps=5):
    """Linear regression, global batch 8: one process on all 8 rows, or DDP with 4 rows each."""
    torch.manual_seed(0)
    x = torch.randn(8, 3, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.1
    model = torch.nn.Linear(3, 1).double()
    if world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
        rows = slice(rank * 4, rank * 4 + 4)
        x, y = x[rows], y[rows]
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = LossCurveRecorder(source="train")
    for step in range(steps):
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.record(step, 0.05, loss)
    return rec.losses


def test_ddp_rank0_records_the_all_reduced_loss():
    single = _train(0, 1)
    ranks = run_distributed(_train, world_size=2)
    assert ranks[1] == []  # only rank 0 keeps the curve
    np.testing.assert_allclose(ranks[0], single, rtol=1e-6)
