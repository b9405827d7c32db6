"""The benchmark's building blocks and the GPU script's --toy run."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from andpro import Press
from andpro.bench import ROWS_A, SUITE, bootstrap_ci, capture_qkv, continuation_bpb, make_press
from andpro.metrics import attention_output_error
from andpro.retrieval import (
    COLON,
    KEYS,
    NOISE,
    SEP,
    VALUES,
    RetrievalTask,
    retrieval_accuracy,
    retrieval_model,
)
from transformers import LlamaConfig, LlamaForCausalLM

PKG = Path(__file__).resolve().parents[1]


def tiny():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        intermediate_size=128,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(cfg).eval()


def test_suite_declares_quality_and_speed_cases():
    kinds = {c.name: c.kind for c in SUITE.cases}
    assert kinds == {
        "attention_error": "quality",
        "retrieval": "quality",
        "overhead": "speed",
        "prefill_decode": "speed",
    }


def test_rows_and_bootstrap():
    for row in ROWS_A:
        assert isinstance(make_press(row, 0.2), Press)
    m, lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and 1.0 <= lo < m < hi <= 4.0
    assert np.isnan(bootstrap_ci([1.0])[1])


def test_capture_and_full_budget_bpb():
    model = tiny()
    ids = torch.randint(0, 256, (1, 80), generator=torch.Generator().manual_seed(0))
    layers = capture_qkv(model, ids)
    assert (
        len(layers) == 2
        and layers[0][0].shape == (1, 4, 80, 16)
        and layers[0][1].shape == (1, 2, 80, 16)
    )
    q, k, v = layers[1]
    keep = torch.ones(1, 2, 60, dtype=torch.bool)
    assert attention_output_error(q[:, :, 60:], k, v, keep).max() < 1e-12
    full = continuation_bpb(model, ids, 60, None)
    same = continuation_bpb(model, ids, 60, make_press("andpro", 60))
    evicted = continuation_bpb(model, ids, 60, make_press("andpro", 40))
    assert same == pytest.approx(full, rel=1e-5)
    assert evicted != pytest.approx(full, rel=1e-6)


def test_retrieval_task_and_accuracy_protocols():
    task = RetrievalTask(context=96, n_pairs=6, guard=24)
    g = torch.Generator().manual_seed(0)
    ctx, keys, values = task.contexts(3, g)
    assert ctx.shape == (3, 96)
    for b in range(3):
        for key, val in zip(keys[b].tolist(), values[b].tolist()):
            (pos,) = (ctx[b] == key).nonzero()[:, 0].tolist()
            assert ctx[b, pos + 1] == val and pos + 1 < 96 - 24
    assert ((ctx >= NOISE[0]) & (ctx < VALUES[1])).all()
    x, y = task.training_batch(2, 4, g)
    assert x.shape == (2, 96 + 16 - 1)
    answers = y[y != -100]
    assert answers.numel() == 8 and ((answers >= VALUES[0]) & (answers < VALUES[1])).all()
    assert (
        (x[:, 96] == SEP).all()
        and (x[:, 98] == COLON).all()
        and ((x[:, 97] >= KEYS[0]) & (x[:, 97] < KEYS[1])).all()
    )
    model = retrieval_model().eval()
    c, q, a = task.eval_batch(4, g)
    for aware in (True, False):
        full = retrieval_accuracy(model, c, q, a, None, aware)
        same = retrieval_accuracy(
            model, c, q, a, make_press("andpro", 96 + 2 if aware else 96), aware
        )
        assert 0.0 <= full <= 1.0 and same == full
        assert (
            0.0
            <= retrieval_accuracy(model, c, q, a, make_press("snapkv_w32_max7", 40), aware)
            <= 1.0
        )
    with pytest.raises(ValueError, match="n_pairs"):
        RetrievalTask(context=40, n_pairs=20, guard=24).contexts(1, g)


def test_gpu_script_toy(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "andpro_gpu_script", PKG / "benchmarks" / "gpu.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "gpu.json"
    report = mod.main(["--toy", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["toy"] and len(saved["timings"]) == 2
    for errs in report["correctness"].values():
        assert errs["window_attention"] < 1e-5 and errs["andpro_scores"] < 1e-5
    for row in saved["timings"]:
        assert row["andpro_s"] > 0 and row["cache_bytes_compressed"] < row["cache_bytes_full"]


def test_continue_training_updates_weights():
    from andpro.retrieval import continue_training

    task = RetrievalTask(context=64, n_pairs=4, guard=16)
    model = retrieval_model()
    before = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    model, res = continue_training(model, task, 2, batch_size=2, n_queries=2, progress=False)
    assert len(res.losses) == 2 and all(np.isfinite(res.losses))
    assert not torch.equal(before, model.model.layers[0].self_attn.q_proj.weight)
    assert not model.training
