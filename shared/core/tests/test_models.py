import math
import signal
import subprocess
import sys

import pytest
import torch

from neurips25_core.data import stdlib_corpus
from neurips25_core.models import (
    cache_key,
    cached_checkpoint,
    evaluate_bpb,
    pretrained_tiny_llama,
    pretrained_tiny_llama_for,
    tiny_llama,
    tiny_llama_config,
    train,
    train_arguments,
    warmup_cosine,
)


def _small_config():
    return tiny_llama_config(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=64)


def test_config_and_model_build_without_downloads():
    cfg = tiny_llama_config(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    assert cfg.num_key_value_heads == 2 and cfg.vocab_size == 256
    model = tiny_llama(cfg, seed=0)
    again = tiny_llama(cfg, seed=0)
    for p, q in zip(model.parameters(), again.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="hidden_size"):
        tiny_llama_config(hidden_size=30, num_heads=4)


def test_warmup_cosine_schedule_shape():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_cosine(opt, total_steps=10, warmup=2, min_lr_ratio=0.1)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert lrs[-1] < lrs[2] and min(lrs) >= 0.1 - 1e-9


def test_training_reduces_the_loss_and_bpb_is_computed():
    corpus = stdlib_corpus()
    model = tiny_llama(_small_config(), seed=0)
    before = evaluate_bpb(model, corpus, batch_size=4, seq_len=32, num_batches=2)
    assert 7.0 < before < 9.0  # near log2(256) = 8 bits for a random byte model
    result = train(
        model,
        corpus,
        steps=30,
        lr=1e-2,
        batch_size=8,
        seq_len=32,
        progress=False,
        eval_every=15,
        eval_batches=2,
    )
    after = evaluate_bpb(model, corpus, batch_size=4, seq_len=32, num_batches=2)
    assert len(result.losses) == 30 and result.tokens == 30 * 8 * 32
    assert [s for s, _ in result.val_bpb] == [15, 30]
    assert after < before - 1.0


def test_train_accepts_an_optimizer_factory_and_a_batch_function():
    model = tiny_llama(_small_config(), seed=1)
    x = torch.randint(0, 256, (2, 16))

    def batch(step):
        return x, x

    res = train(
        model, batch, steps=3, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), progress=False
    )
    assert len(res.losses) == 3
    with pytest.raises(ValueError, match="steps"):
        train(model, batch, steps=0)


def test_pretrained_cache_trains_once(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    cfg = _small_config()
    first = pretrained_tiny_llama(cfg, steps=3, batch_size=2, seq_len=16, progress=False)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert any(f.endswith(".pt") for f in files)
    assert first.neurips25_meta["steps"] == 3 and first.neurips25_meta["cached"] is False
    second = pretrained_tiny_llama(cfg, steps=3, batch_size=2, seq_len=16, progress=False)
    assert second.neurips25_meta["cached"] is True
    for p, q in zip(first.parameters(), second.parameters()):
        assert torch.equal(p, q)
    assert sorted(p.name for p in tmp_path.iterdir()) == files


def test_train_trains_inside_no_grad_and_inference_mode():
    for outer in (torch.no_grad, torch.inference_mode):
        model = tiny_llama(_small_config(), seed=0)
        before = [p.detach().clone() for p in model.parameters()]
        x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
        with outer():
            res = train(model, lambda step, x=x: (x, x), steps=2, progress=False)
        assert len(res.losses) == 2
        moved = [not torch.equal(a, b) for a, b in zip(before, model.parameters())]
        assert all(moved), f"{outer.__name__}: some parameters did not train"


def test_pretrained_tiny_llama_on_an_empty_cache_under_no_grad(tmp_path, monkeypatch):
    """The bug of issue 11: a case under no_grad that trains the shared model on a fresh machine."""
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    with torch.no_grad():
        model = pretrained_tiny_llama(_small_config(), steps=2, batch_size=2, seq_len=16)
    assert model.neurips25_meta["cached"] is False and math.isfinite(
        model.neurips25_meta["val_bpb"]
    )


def test_train_rejects_bad_arguments():
    model = tiny_llama(_small_config(), seed=0)
    corpus = stdlib_corpus()
    for kwargs, name in [
        ({"lr": float("nan")}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"min_lr_ratio": -0.1}, "min_lr_ratio"),
        ({"seq_len": 10_000}, "seq_len"),
        ({"grad_clip": 0.0}, "grad_clip"),
    ]:
        with pytest.raises(ValueError, match=name):
            train(model, corpus, steps=1, progress=False, **kwargs)


def test_cache_key_covers_every_train_default():
    base = train_arguments(steps=10)
    assert {"weight_decay", "warmup", "min_lr_ratio", "grad_clip", "schedule", "seed"} <= set(base)
    key = cache_key({"train": base})
    assert key != cache_key({"train": train_arguments(steps=10, weight_decay=0.0)})
    assert key != cache_key({"train": train_arguments(steps=10, grad_clip=None)})
    assert key == cache_key({"train": train_arguments(steps=10)})
    with pytest.raises(TypeError, match="nosuch"):
        train_arguments(nosuch=1)


def test_changed_weight_decay_trains_a_new_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    cfg = _small_config()
    a = pretrained_tiny_llama(cfg, steps=2, batch_size=2, seq_len=16, progress=False)
    b = pretrained_tiny_llama(
        cfg, steps=2, batch_size=2, seq_len=16, progress=False, weight_decay=0.0
    )
    assert a.neurips25_meta["key"] != b.neurips25_meta["key"]
    assert b.neurips25_meta["cached"] is False
    assert len(list(tmp_path.glob("tiny_llama-*.pt"))) == 2


_KILLED_WRITER = """
import os, signal, sys, torch
from neurips25_core import models

real_save = torch.save

def half_save(obj, handle, *args, **kwargs):
    real_save(obj, handle, *args, **kwargs)
    handle.flush()
    handle.truncate(handle.tell() // 2)  # half of the bytes are on disk...
    os.kill(os.getpid(), signal.SIGKILL)  # ...when the writer dies

torch.save = half_save
models.cached_checkpoint("thing", {"a": 1}, lambda: ({"w": torch.ones(1000)}, {"built": "killed"}),
                         root=sys.argv[1])
"""


def test_a_killed_writer_leaves_no_checkpoint_that_loads(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert not list(tmp_path.glob("thing-*.pt")), "a half-written checkpoint took the real name"
    assert list(tmp_path.glob(".thing-*.tmp")), "the killed writer should have left its temp file"
    calls = []

    def build():
        calls.append(1)
        return {"w": torch.full((1000,), 2.0)}, {"built": "again"}

    payload, meta = cached_checkpoint("thing", {"a": 1}, build, root=tmp_path)
    assert calls == [1] and meta["built"] == "again" and meta["cached"] is False
    assert torch.equal(payload["w"], torch.full((1000,), 2.0))
    again, meta2 = cached_checkpoint("thing", {"a": 1}, build, root=tmp_path)
    assert calls == [1] and meta2["cached"] is True and torch.equal(again["w"], payload["w"])


def test_a_damaged_checkpoint_is_rebuilt_not_loaded(tmp_path, capsys):
    _, meta = cached_checkpoint(
        "thing", {"a": 2}, lambda: ({"w": torch.ones(3)}, {}), root=tmp_path
    )
    path = tmp_path / f"thing-{meta['key']}.pt"
    path.write_bytes(path.read_bytes()[:20])
    payload, meta = cached_checkpoint(
        "thing", {"a": 2}, lambda: ({"w": torch.zeros(3)}, {}), root=tmp_path
    )
    assert meta["cached"] is False and torch.equal(payload["w"], torch.zeros(3))
    assert "does not load" in capsys.readouterr().err


def test_cached_checkpoint_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="name"):
        cached_checkpoint("a/b", {}, lambda: ({}, {}), root=tmp_path)
    with pytest.raises(TypeError, match="key_parts"):
        cached_checkpoint("a", [1], lambda: ({}, {}), root=tmp_path)


def test_smoke_model_is_toy_sized(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_CACHE", str(tmp_path))
    model = pretrained_tiny_llama_for("smoke", progress=False)
    assert sum(p.numel() for p in model.parameters()) < 100_000
    with pytest.raises(ValueError, match="mode"):
        pretrained_tiny_llama_for("tiny")


def test_llama_shape_config_has_the_published_parameter_counts():
    import pytest

    from neurips25_core.models import llama_shape_config

    def count(cfg):
        d, f, v, L = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
        kv = cfg.num_key_value_heads * d // cfg.num_attention_heads
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
        return v * d * (1 if cfg.tie_word_embeddings else 2) + L * per_layer + d

    # Llama-3.2-1B: 1.236B parameters (tied embeddings); Llama-3.1-8B: 8.030B
    assert count(llama_shape_config("llama-3.2-1b")) == 1_235_814_400
    assert count(llama_shape_config("llama-3.1-8b")) == 8_030_261_248
    assert (
        llama_shape_config("llama-3.2-1b", max_position_embeddings=2048).max_position_embeddings
        == 2048
    )
    with pytest.raises(ValueError, match="name"):
        llama_shape_config("llama-9")


def test_benchmark_llama_toy_is_seeded_and_leaves_the_global_rng():
    from neurips25_core.models import benchmark_llama

    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = benchmark_llama(True, dtype=torch.float64)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = benchmark_llama(True, dtype=torch.float64)
    assert not a.training and a.config.hidden_size == 64 and a.config.vocab_size == 260
    assert next(a.parameters()).dtype == torch.float64
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
    c = benchmark_llama(True, seed=1)
    assert not torch.equal(next(c.parameters()).double(), next(a.parameters()))
    with pytest.raises(ValueError, match="name"):
        benchmark_llama(False, shape="llama-9")
