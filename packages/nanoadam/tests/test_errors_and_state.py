"""Bad inputs raise clear errors before anything changes; state_dict round trip and refusal."""

from __future__ import annotations

import pytest
import torch
from nanoadam import NanoAdam, param_groups

from neurips25_core.testing import randn


def _p():
    return torch.nn.Parameter(randn(10, 10, seed=0))


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(density=0.0), "density"),
        (dict(density=1.5), "density"),
        (dict(chunk_size=0), "chunk_size"),
        (dict(chunk_size=40000, index_dtype=torch.int16), "chunk_size"),
        (dict(criterion="largest"), "criterion"),
        (dict(state_on_refresh="keep"), "state_on_refresh"),
        (dict(final_density=0.04), "total_steps"),
        (dict(mask_interval=0), "mask_interval"),
        (dict(index_dtype=torch.float32), "index_dtype"),
    ],
)
def test_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        NanoAdam([_p()], **kwargs)


def test_sparse_grad_rejected_before_change():
    p = _p()
    before = p.detach().clone()
    opt = NanoAdam([p], density=0.5)
    p.grad = torch.eye(10).to_sparse()
    with pytest.raises(TypeError, match="sparse"):
        opt.step()
    assert torch.equal(p.detach(), before)


def test_exclude_leaving_nothing():
    with pytest.raises(ValueError, match="exclude"):
        param_groups(torch.nn.Linear(3, 3), exclude=("weight",))


def _trained(steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    opt = NanoAdam(
        param_groups(model, exclude=("1.",)), lr=1e-2, density=0.2, mask_interval=3, chunk_size=32
    )
    x = randn(4, 8, seed=1)
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
    return model, opt, x


def test_state_dict_round_trip():
    model, opt, x = _trained()
    sd = opt.state_dict()
    model2 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    model2.load_state_dict(model.state_dict())
    opt2 = NanoAdam(
        param_groups(model2, exclude=("1.",)), lr=1e-2, density=0.2, mask_interval=3, chunk_size=32
    )
    opt2.load_state_dict(sd)
    assert opt2.state[model2[0].weight]["idx"].dtype == torch.int32
    for m, o in ((model, opt), (model2, opt2)):
        for _ in range(4):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a, b)
    assert opt2.param_groups[0]["step"] == 10


def test_state_dict_mismatch_refused():
    _, opt, _ = _trained()
    sd = opt.state_dict()
    other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    with pytest.raises(ValueError, match="chunk_size"):
        NanoAdam(param_groups(other, exclude=("1.",)), density=0.2, chunk_size=64).load_state_dict(
            sd
        )
    small = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2))
    opt3 = NanoAdam(param_groups(small, exclude=("1.",)), density=0.2, chunk_size=32)
    with pytest.raises(ValueError, match="out of range"):
        opt3.load_state_dict(sd)
    sd["state"][0]["exp_avg"] = sd["state"][0]["exp_avg"][:-1]
    with pytest.raises(ValueError, match="exp_avg"):
        NanoAdam(param_groups(other, exclude=("1.",)), density=0.2, chunk_size=32).load_state_dict(
            sd
        )


def test_lr_scheduler_works():
    p = _p()
    opt = NanoAdam([p], lr=1e-2, density=0.5)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5**t)
    for _ in range(3):
        p.grad = torch.ones_like(p)
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-2 / 8)


@pytest.mark.slow
def test_hf_trainer_optimizers_argument(tmp_path):
    """``transformers.Trainer(optimizers=(NanoAdam(...), None))`` trains with its own scheduler."""
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate")
    from transformers import Trainer, TrainingArguments

    from neurips25_core.models import tiny_llama, tiny_llama_config

    model = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2), seed=0)
    opt = NanoAdam(param_groups(model), lr=1e-2, density=0.1, mask_interval=3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(0, 256, (16,), generator=gen)} for _ in range(12)]
    for r in rows:
        r["labels"] = r["input_ids"].clone()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=2,
        learning_rate=1e-2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=args, train_dataset=rows, optimizers=(opt, None)).train()
    assert opt.param_groups[0]["step"] == 6
    assert opt.param_groups[0]["lr"] < 1e-2  # the Trainer's linear schedule drove our groups
    q = model.model.layers[0].self_attn.q_proj.weight
    name = next(n for n, p in model.named_parameters() if p is q)
    moved = q.detach() != before[name]
    assert moved.any()
    # entries never selected by any refresh stayed bit-identical
    ever = opt._touched[q].view_as(q)
    assert not (moved & ~ever).any()
    assert 0 < opt.touched_fraction() < 0.5
