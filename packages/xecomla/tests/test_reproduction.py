"""The reduced reproduction's pieces: probe rows, student assembly, the cached-decode protocol of
the peers and the byte count of a quantized cache."""

from __future__ import annotations

import pytest
import torch
import xecomla
from transformers import DynamicCache, LlamaForCausalLM
from xecomla import reproduction as rp

from neurips25_core.testing import assert_close


def _teacher(layers=2):
    torch.manual_seed(0)
    return LlamaForCausalLM(rp.teacher_config(32, layers, max_positions=256)).eval()


def test_recall_rows_format():
    w, mark = rp.recall_rows(3, 63, torch.Generator().manual_seed(1))
    assert w.shape == mark.shape == (3, 64)
    for row, m in zip(w, mark, strict=True):
        text = bytes(row.tolist()).decode()
        table = dict((text[i + 1], text[i + 3]) for i in range(0, rp.TABLE_BYTES, rp.PAIR_BYTES))
        assert len(table) == rp.PAIRS and text[rp.TABLE_BYTES - 1] == ";"
        answers = [i for i in range(len(text)) if m[i]]
        assert answers and all(text[i - 1] == "?" for i in answers)
        assert all(table[text[i - 2]] == text[i] for i in answers)  # the value of that key


def test_recall_eval_labels_only_answers():
    x, labels = rp.recall_eval(4, 50)
    keep = labels != -100
    assert x.shape == labels.shape == (4, 50) and keep.any()
    assert (x[:, 1:][keep[:, :-1]] == labels[:, :-1][keep[:, :-1]]).all()  # labels are next bytes


def test_assemble_copies_the_ild_mixers():
    teacher = _teacher(layers=4)
    cfg = xecomla.MLAConfig(r_q=24, r_kv=8, d_nope=4, d_rope=4, d_v=8)
    mla_all = xecomla.compose(teacher, mla_layers=[0, 1, 2, 3], mla_config=cfg)
    mamba_all = xecomla.compose(teacher, mla_layers=[], mla_config=None)
    with torch.no_grad():
        for p in list(mla_all.parameters()) + list(mamba_all.parameters()):
            p.add_(0.01)  # stands in for ILD training
    student = rp.assemble(teacher, ["mla", "gqa", "mamba2", "mla"], mla_all, mamba_all)
    layers = student.model.layers
    assert student.hybrid_layout.kinds == ("mla", "gqa", "mamba2", "mla")
    for i, source in ((0, mla_all), (2, mamba_all), (3, mla_all)):
        for a, b in zip(
            layers[i].self_attn.parameters(),
            source.model.layers[i].self_attn.parameters(),
            strict=True,
        ):
            assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    for a, b in zip(
        layers[1].self_attn.parameters(),
        teacher.model.layers[1].self_attn.parameters(),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_cached_logits_with_an_exact_cache_equals_the_full_forward():
    teacher = _teacher()
    x = torch.randint(0, 256, (2, 23))
    fn = rp.cached_logits(lambda m: DynamicCache(), prefill=9)
    with torch.no_grad():
        assert_close(fn(teacher, x), teacher(input_ids=x).logits, rtol=1e-5)


def test_fp8_peer_bytes_and_protocol():
    teacher = _teacher()
    cache = rp.peer_cache("fp8", teacher.config)
    x = torch.randint(0, 256, (1, 40))
    with torch.no_grad():
        logits = rp.cached_logits(lambda m: cache, prefill=30)(teacher, x)
        full = teacher(input_ids=x).logits
    assert_close(logits[:, :30], full[:, :30], rtol=1e-5)  # the prefill reads exact keys
    assert not torch.equal(logits[:, 30:], full[:, 30:])  # decoding reads the fp8 cache
    quantized, residual = rp.quantized_cache_bytes(cache)
    numbers = 2 * 2 * 2 * 8 * 40  # layers · (k, v) · n_kv · d_h · tokens
    assert (
        residual == 0 and quantized == numbers + 2 * 2 * 2
    )  # 1 byte each + one bf16 scale per tensor


@pytest.mark.slow  # the first quanto use in an environment compiles its C++ extension (~90 s CPU)
def test_quanto_peer_bytes_count_the_residual_window():
    pytest.importorskip(
        "optimum.quanto", reason="the peers extra (optimum-quanto) is not installed"
    )
    teacher = _teacher()
    cache = rp.peer_cache("quanto2", teacher.config)
    x = torch.randint(0, 256, (1, 64 + 5))
    with torch.no_grad():
        rp.cached_logits(lambda m: cache, prefill=64)(teacher, x)
    quantized, residual = rp.quantized_cache_bytes(cache)
    assert residual == 2 * 2 * 2 * 8 * 5 * 2  # 5 decoded tokens kept in bf16, both layers
    numbers = 2 * 2 * 2 * 8 * 64
    assert numbers // 4 <= quantized < numbers // 2  # 2 bits per number plus group scales


def test_bad_peer_kind():
    with pytest.raises(ValueError, match="kind"):
        rp.peer_cache("int3", _teacher().config)
