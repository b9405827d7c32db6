"""kd_loss and distill: the formula, padding, a real loss decrease, two gloo ranks = one process."""

import pytest
import torch
from hybridprune import PruneTarget, collect_importance, distill, kd_loss, prune

from neurips25_core.distributed import run_distributed
from neurips25_core.testing import assert_close


def _logits(seed, shape=(2, 5, 7)):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_kd_loss_is_forward_kl_averaged_over_real_tokens():
    s, t = _logits(0), _logits(1)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    want = 0.0
    for b in range(2):
        for i in range(5):
            if mask[b, i]:
                pt = torch.softmax(t[b, i], -1)
                want += float((pt * (pt.log() - torch.log_softmax(s[b, i], -1))).sum())
    got = kd_loss(s, t, mask=mask)
    assert abs(float(got) - want / 8) < 1e-12
    # padded positions do not count, whatever their logits
    s2 = s.clone()
    s2[1, 3:] += 100.0
    assert float(kd_loss(s2, t, mask=mask)) == pytest.approx(float(got), abs=1e-12)
    # temperature: the same KL on logits / τ
    assert float(kd_loss(s, t, temperature=2.0)) == pytest.approx(
        float(kd_loss(s / 2, t / 2)), abs=1e-12
    )
    assert float(kd_loss(t, t)) == pytest.approx(0.0, abs=1e-12)


def test_kd_loss_bad_input():
    s = _logits(0)
    with pytest.raises(ValueError, match="teacher_logits"):
        kd_loss(s, s[:, :4])
    with pytest.raises(ValueError, match="temperature"):
        kd_loss(s, s, temperature=0.0)
    with pytest.raises(ValueError, match="mask"):
        kd_loss(s, s, mask=torch.ones(2, 4))
    with pytest.raises(TypeError, match="student_logits"):
        kd_loss(s.long(), s)


def _pruned(make_nemotron_h, dtype=torch.float64):
    teacher = make_nemotron_h(dtype=dtype)
    ids = torch.randint(3, 64, (4, 12), generator=torch.Generator().manual_seed(0))
    imp = collect_importance(teacher, ids)
    target = PruneTarget(
        hidden_size=12,
        intermediate_size=16,
        num_attention_heads=2,
        mamba_num_heads=4,
        mamba_head_dim=3,
    )
    return teacher, prune(teacher, imp, target)


def test_distill_lowers_the_kd_loss_and_leaves_the_teacher_alone(make_nemotron_h):
    teacher, student = _pruned(make_nemotron_h, torch.float32)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    train = [torch.randint(3, 64, (2, 12), generator=g) for _ in range(4)]
    held = torch.randint(3, 64, (2, 12), generator=g)

    def held_loss():
        with torch.no_grad():
            return float(kd_loss(student(held).logits, teacher(held).logits))

    start = held_loss()
    with torch.no_grad():  # distill trains under enable_grad even inside no_grad
        losses = distill(student, teacher, train, steps=20, lr=5e-3, warmup=2)
    assert len(losses) == 20 and sum(losses[-4:]) < sum(losses[:4])
    assert held_loss() < start
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())


def test_two_gloo_processes_distill_like_one(make_nemotron_h):
    teacher, student = _pruned(make_nemotron_h)
    g = torch.Generator().manual_seed(2)
    batches = [torch.randint(3, 64, (4, 10), generator=g) for _ in range(5)]
    mask = torch.ones(4, 10, dtype=torch.long)
    mask[3, 6:] = 0  # unequal token counts per rank: the loss must divide by the global count
    data = [{"input_ids": b, "attention_mask": mask} for b in batches]
    init = {k: v.clone() for k, v in student.state_dict().items()}
    single = distill(student, teacher, data, steps=5, lr=1e-2, warmup=2)
    want = student.state_dict()

    def rank_fn(rank, world_size, init):
        student.load_state_dict(init)
        shard = [
            {
                "input_ids": d["input_ids"][rank * 2 : rank * 2 + 2],
                "attention_mask": d["attention_mask"][rank * 2 : rank * 2 + 2],
            }
            for d in data
        ]
        losses = distill(student, teacher, shard, steps=5, lr=1e-2, warmup=2)
        return losses, student.state_dict()

    for losses, sd in run_distributed(rank_fn, world_size=2, args=(init,)):
        assert losses == pytest.approx(single, rel=1e-6)
        for k in want:
            assert_close(sd[k], want[k], rtol=1e-6)
        assert any(not torch.equal(sd[k], init[k]) for k in want)


def test_distill_bad_input(make_nemotron_h):
    teacher, student = _pruned(make_nemotron_h)
    ids = [torch.randint(3, 64, (2, 6))]
    for kwargs, name in (
        (dict(steps=0), "steps"),
        (dict(lr=0.0), "lr"),
        (dict(schedule="step"), "schedule"),
        (dict(warmup=-1), "warmup"),
        (dict(temperature=-1.0), "temperature"),
    ):
        with pytest.raises(ValueError, match=name):
            distill(student, teacher, ids, **({"steps": 2, "lr": 1e-3} | kwargs))
    with pytest.raises(ValueError, match="student"):
        distill(teacher, teacher, ids, steps=1, lr=1e-3)
    with pytest.raises(ValueError, match="batches"):
        distill(student, teacher, [], steps=1, lr=1e-3)
    with pytest.raises(TypeError, match="teacher"):
        distill(student, "teacher", ids, steps=1, lr=1e-3)
