import json

import pytest
import torch

from neurips25_core.data import stdlib_corpus
from neurips25_core.models import (
    evaluate_bpb,
    pretrained_tiny_llama,
    tiny_llama,
    tiny_llama_config,
    train,
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
    meta = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert meta["steps"] == 3
    second = pretrained_tiny_llama(cfg, steps=3, batch_size=2, seq_len=16, progress=False)
    for p, q in zip(first.parameters(), second.parameters()):
        assert torch.equal(p, q)
    assert sorted(p.name for p in tmp_path.iterdir()) == files
