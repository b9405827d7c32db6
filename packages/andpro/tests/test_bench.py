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
    ANSWER_V,
    ANSWER_W,
    ITEM_A,
    ITEM_B,
    NOISE,
    QUERY,
    SEP,
    RetrievalTask,
    retrieval_correct,
    retrieval_model,
)
from transformers import LlamaConfig, LlamaForCausalLM

from neurips25_core.testing import assert_close

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


def test_mqar_task_layout():
    task = RetrievalTask(context=96, n_items=6, guard=12)
    g = torch.Generator().manual_seed(0)
    ctx, keys, vals = task.contexts(3, g)
    assert ctx.shape == (3, 96) and vals.shape == (3, 6, 2)
    for b in range(3):
        assert len(set(keys[b].tolist())) == 6 and len(set(vals[b, :, 0].tolist())) == 6
        for key, (v, w) in zip(keys[b].tolist(), vals[b].tolist()):
            (pos,) = (ctx[b] == ITEM_A + 16 * key + v).nonzero()[:, 0].tolist()
            assert ctx[b, pos + 1] == ITEM_B + 16 * v + w and 4 <= pos < 96 - 12 - 1
    noise = ctx[ctx < ITEM_A]
    assert ((noise >= NOISE[0]) & (noise < NOISE[1])).all()
    x, y = task.training_batch(2, 4, g)
    assert x.shape == (2, 96 + 1 + 12 - 1) and (x[:, 96] == SEP).all()
    targets = y[y != -100].view(2, 4, 2)
    assert ((targets[..., 0] >= ANSWER_V[0]) & (targets[..., 0] < ANSWER_V[1])).all()
    assert ((targets[..., 1] >= ANSWER_W[0]) & (targets[..., 1] < ANSWER_W[1])).all()
    q = x[:, 97::3]
    assert ((q >= QUERY[0]) & (q < QUERY[1])).all()
    # the answer follows from the context: the item token of the asked key holds the first
    # value, the next item token holds the second
    c, qq, a = task.eval_batch(4, g)
    for b in range(4):
        k, v, w = int(qq[b]) - QUERY[0], int(a[b, 0]) - ANSWER_V[0], int(a[b, 1]) - ANSWER_W[0]
        assert (c[b] == ITEM_A + 16 * k + v).sum() == 1 and (c[b] == ITEM_B + 16 * v + w).sum() == 1
    with pytest.raises(ValueError, match="n_items"):
        RetrievalTask(context=40, n_items=20, guard=8)


@pytest.mark.parametrize("aware", [True, False])
@torch.no_grad()
def test_shared_prefill_cache_equals_the_press_own_cache(aware):
    from andpro.retrieval import _prompt_and_rest, compressed_cache, retrieval_correct_many

    task = RetrievalTask(context=96, n_items=6, guard=12)
    model = retrieval_model().eval()
    c, q, a = task.eval_batch(3, torch.Generator().manual_seed(1))
    prompt, rest = _prompt_and_rest(c, q, a, aware)
    layers = capture_qkv(model, prompt)
    for row in ("andpro", "attention", "snapkv_w32_max7", "streaming_llm", "random"):
        press = make_press(row, 24, window=4)
        built = compressed_cache(model, layers, press)
        with press(model) as own:
            model(prompt)
            ref = model(rest, cache=own).logits
            built.active = True
            got = model(rest, cache=built).logits
            built.active = False
        for mine, theirs in zip(built.layers, own.layers):
            # the press's cache also holds the `rest` tokens, appended after the compacted prompt
            p = mine.valid.shape[-1]
            assert torch.equal(mine.valid, theirs.valid[..., :p])
            assert torch.equal(mine.positions, theirs.positions[..., :p])
            assert_close(mine.keys, theirs.keys[..., :p, :], rtol=1e-6)
            assert_close(mine.values, theirs.values[..., :p, :], rtol=1e-6)
        assert_close(got, ref, rtol=1e-6)
    full = retrieval_correct_many(
        model, c, q, a, {"full": None, "same": make_press("andpro", 96, window=4)}, aware
    )
    assert torch.equal(full["full"], retrieval_correct(model, c, q, a, None, aware))
    assert torch.equal(full["same"], full["full"])


def test_retrieval_model_trains_and_is_cached(tmp_path):
    from andpro.retrieval import trained_retrieval_model

    task = dict(context=48, n_items=3, guard=8)
    stages = [(task, dict(steps=3, batch_size=2)), (task, dict(steps=2, batch_size=2))]
    kw = dict(eval_n=4, progress=False, root=tmp_path)
    model, t, meta = trained_retrieval_model(stages, **kw)
    assert not meta["cached"] and np.isfinite(meta["final_loss"]) and t.context == 48
    assert set(meta["full_cache_accuracy"]) == {"aware", "agnostic"}
    again, _, meta2 = trained_retrieval_model(stages, **kw)
    assert meta2["cached"] and meta2["key"] == meta["key"]
    for p, p2 in zip(model.parameters(), again.parameters()):
        assert torch.equal(p, p2)
    changed = [stages[0], (task, dict(steps=2, batch_size=2, weight_decay=0.1))]
    _, _, meta3 = trained_retrieval_model(changed, **kw)
    assert meta3["key"] != meta["key"]
    with torch.no_grad():  # trains inside no_grad (the core's train enables grad)
        fresh = [(task, dict(steps=2, batch_size=2, lr=1e-3))]
        trained, _, meta4 = trained_retrieval_model(fresh, **kw)
    assert not meta4["cached"] and np.isfinite(meta4["final_loss"])
    assert not torch.equal(
        trained.model.embed_tokens.weight, retrieval_model().model.embed_tokens.weight
    )


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
