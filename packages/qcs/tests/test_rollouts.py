"""LoRA rollouts (peft r=8 on q/v) on a tiny byte Llama: training, start point, weights, errors."""

from __future__ import annotations

import pytest
import torch
from qcs import QCSConfig, QCSSelector
from qcs.rollouts import LoRARollouts, expand_token_weights
from qcs.tasks import encode_pairs, make_instruction_pool, make_target_set

from neurips25_core.models import tiny_llama, tiny_llama_config

pytest.importorskip("peft", reason="peft is a dependency of qcs; run `uv sync --all-packages`")


@pytest.fixture(scope="module")
def setup():
    base = tiny_llama(tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2), seed=0)
    pool = make_instruction_pool(16, seed=0, families=("add", "sort"))
    target = make_target_set(8, seed=1)
    return base, pool, target


def _rollouts(setup, **kw):
    base, pool, target = setup
    args = dict(steps=8, batch_size=8, lr=3e-2)
    args.update(kw)
    return LoRARollouts(base, pool, target, **args)


def test_loss_falls_and_base_weights_untouched(setup):
    base = setup[0]
    before = {k: v.clone() for k, v in base.state_dict().items()}
    ro = _rollouts(setup)
    trainable = [n for n, p in ro.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable} == {"q_proj", "v_proj"}
    a = next(
        p for n, p in ro.model.named_parameters() if n.endswith("q_proj.lora_A.default.weight")
    )
    assert a.shape == (8, 32)  # r = 8
    f0 = ro.eval_fn(ro.reset())
    torch.manual_seed(0)
    model = ro.train_fn(torch.ones(ro.n, ro.max_tokens))
    f1 = ro.eval_fn(model)
    assert len(ro.last_losses) == 8
    assert f1 < f0 - 0.02, (f0, f1)
    assert sum(ro.last_losses[-3:]) < sum(ro.last_losses[:3])
    # the caller's model and the frozen base inside the peft wrapper are both unchanged
    for k, v in base.state_dict().items():
        assert torch.equal(v, before[k]), k
    inner = {
        k.replace(".base_layer", ""): v
        for k, v in ro.model.get_base_model().state_dict().items()
        if "lora_" not in k
    }
    for k, v in before.items():
        assert torch.equal(inner[k], v), k


def test_same_start_point_crn_and_empty_selection(setup):
    ro = _rollouts(setup, steps=3)
    f0 = ro.eval_fn(ro.reset())
    c = torch.rand(ro.n, ro.max_tokens, generator=torch.Generator().manual_seed(0))
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        runs.append(ro.eval_fn(ro.train_fn(c)))
    assert runs[0] == runs[1]  # every rollout restarts from the same adapters; same seed, same run
    assert ro.eval_fn(ro.train_fn(torch.zeros(ro.n, ro.max_tokens))) == f0
    assert ro.last_losses == []


def test_unselected_rows_are_never_trained(setup):
    """Weights on rows A only == a rollout on the pool restricted to A (same seed)."""
    base, pool, target = setup
    rows = [1, 4, 6, 9, 13]
    ro = _rollouts(setup, steps=3, batch_size=3)
    w = torch.zeros(ro.n, ro.max_tokens)
    w[rows] = 1.0
    torch.manual_seed(3)
    f_masked = ro.eval_fn(ro.train_fn(w))
    sub = LoRARollouts(base, [pool[i] for i in rows], target, steps=3, batch_size=3, lr=3e-2)
    torch.manual_seed(3)
    f_sub = sub.eval_fn(sub.train_fn(torch.ones(sub.n, sub.max_tokens)))
    assert abs(f_masked - f_sub) < 1e-5


def test_weights_land_on_response_labels(setup):
    pool = setup[1]
    enc = encode_pairs(pool)
    ro = _rollouts(setup)
    c = torch.rand(ro.n, ro.max_tokens + 3)
    full = ro.full_weights(c)
    assert full.shape == enc["labels"].shape
    assert torch.equal(full > 0, enc["labels"] != -100)
    for i in (0, 7):
        s, T = int(enc["response_start"][i]), int(enc["token_lengths"][i])
        assert torch.equal(full[i, s : s + T], c[i, :T])
    with pytest.raises(ValueError, match="seq_len"):
        expand_token_weights(c[:, :4], enc["response_start"], enc["token_lengths"], 2)


def test_selector_runs_on_lora_rollouts(setup):
    ro = _rollouts(setup, steps=2, batch_size=4)
    cfg = QCSConfig(budget=4, token_ratio=0.5, rollouts=2, outer_steps=2, inner_steps=3)
    selector = QCSSelector(ro.train_fn, ro.eval_fn, cfg, seed=0)
    out = selector.fit(ro.pool)
    assert len(ro.last_losses) == 3  # the config's inner_steps, not the constructor's 2
    assert out.sequence_idx.numel() == 4 and out.token_mask.shape == (ro.n, ro.max_tokens)
    assert torch.equal(out.token_mask.any(1).nonzero().squeeze(1), out.sequence_idx)
    assert len(selector.history) == 2
    for h in selector.history:
        assert abs(float(h["s"].sum()) - 4) < 1e-4
        assert 0.0 < h["F_mean"] < 10.0  # a real target loss in nats/byte, not a placeholder


def test_bad_input(setup):
    base, pool, target = setup
    ro = _rollouts(setup, steps=1)
    good = torch.ones(ro.n, ro.max_tokens)
    with pytest.raises(ValueError, match="weights"):
        ro.train_fn(good[:-1])
    with pytest.raises(ValueError, match="weights"):
        ro.train_fn(good[:, :-1])
    with pytest.raises(TypeError, match="weights"):
        ro.train_fn(good.long())
    with pytest.raises(ValueError, match="weights"):
        ro.train_fn(-good)
    with pytest.raises(ValueError, match="weights"):
        ro.train_fn(good * float("nan"))
    with pytest.raises(ValueError, match="steps"):
        ro.train_fn(good, steps=0)
    for kw, exc, name in (
        ({"steps": 0}, ValueError, "steps"),
        ({"r": 0}, ValueError, "r"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"batch_size": 1.5}, TypeError, "batch_size"),
        ({"target_modules": ("nope_proj",)}, ValueError, "target_modules"),
    ):
        with pytest.raises(exc, match=name):
            LoRARollouts(base, pool, target, **kw)
    with pytest.raises(TypeError, match="base_model"):
        LoRARollouts("llama", pool, target)
    with pytest.raises(TypeError, match="pool"):
        LoRARollouts(base, 3, target)
    with pytest.raises(ValueError, match="target"):
        LoRARollouts(base, pool, [])
