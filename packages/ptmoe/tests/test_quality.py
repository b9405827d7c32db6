"""The reduced reproduction's pieces: pretraining text, the mixed corpus, arm budgets, CIs."""

from __future__ import annotations

import re

import pytest
import torch
from ptmoe import quality

from neurips25_core.models import tiny_llama, tiny_llama_config


def test_pretrain_text_is_qa_and_exact_arithmetic():
    text = quality.pretrain_text(20_000, seed=0).decode()
    lines = text.splitlines()
    qa = [ln for ln in lines if " Q: " in ln]
    assert qa and all(" A: " in ln for ln in qa)
    # Different surface format from the tasks: no "Context:"/"Question:"/"Answer:" headers.
    assert "Context:" not in text and "Question:" not in text
    sums = [ln.split()[-1] for ln in lines if " Q: " not in ln]
    assert len(sums) > 5  # 15 % of the lines
    for expression in sums:
        left, right = expression.split("=")
        assert re.fullmatch(r"[0-9+\-*/()]+", left)
        assert eval(left) == int(right), expression  # exact: divisions always divide
    assert quality.pretrain_text(500, seed=1) != quality.pretrain_text(500, seed=2)


def test_pretrain_qa_comes_from_generators_distinct_from_the_tasks():
    from ptmoe.tasks import IN_DOMAIN, OUT_OF_DOMAIN, qa_examples

    text = quality.pretrain_text(50_000, seed=0).decode()
    # None of the evaluation generators' relations (in or out of domain) is in pretraining.
    for phrase in (
        "lives in",
        "has a home in",
        "What colour",
        "value of",
        "born",
        "works as",
        "What animal",
        "flags",
        "apples",
        "country",
    ):
        assert phrase not in text, phrase
    items = [ln for ln in text.splitlines() if " Q: " in ln]
    assert len(items) > 100
    for line in items:  # every asked value is copied from the line's own facts
        facts, *pairs = line.split(" Q: ")
        assert 1 <= len(pairs) <= quality.PRETRAIN_QUESTIONS
        for pair in pairs:
            assert pair.split(" A: ")[1] in facts
    # The task examples rewritten in the pretraining format (the zero-shot probe).
    ex = qa_examples(list(IN_DOMAIN) + list(OUT_OF_DOMAIN), 12, seed=0)
    for e in ex:
        p = quality.pretrain_format(e)
        assert p.answer == e.answer and " Q: " in p.source and p.source.endswith(" A:")
        assert "Context:" not in p.source and "Question:" not in p.source


def test_mixed_corpus_arguments_are_checked():
    with pytest.raises(ValueError, match="stdlib_bytes"):
        quality.mixed_corpus(stdlib_bytes=10)
    with pytest.raises(ValueError, match="synthetic_bytes"):
        quality.mixed_corpus(synthetic_bytes=1.5)
    with pytest.raises(ValueError, match="num_bytes"):
        quality.pretrain_text(0)


def test_mixed_corpus_interleaves_both_sources():
    corpus = quality.mixed_corpus(50_000, 60_000, seed=0)
    text = bytes(corpus.train.tolist())
    # Validation: a tenth of each (the text generator ends on a whole line, so a few bytes more).
    assert len(text) == 110_000 and 11_000 <= corpus.val.numel() < 11_400
    assert b" Q: " in text and b"def " in text
    assert corpus.fingerprint != quality.mixed_corpus(50_000, 60_000, seed=1).fingerprint


def test_arms_land_on_the_common_budget():
    config = tiny_llama_config(hidden_size=64, num_layers=2, num_heads=4)
    target = 40 * 64
    expected = {"pt": 2560, "ptmoe": 2578, "dpt": 2600, "smop": 2688}
    for name in quality.ARMS:
        if name.startswith("peft_"):
            continue
        model, info = quality.build_arm(name, tiny_llama(config), "qa")
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable == info["trainable"]
        if name in expected:
            assert trainable == expected[name], name
        assert abs(trainable / target - 1) <= 0.1, (name, trainable)
        # Frozen base: only the prompt encoder trains.
        assert all(not p.requires_grad for p in model.base_model.parameters())
    with pytest.raises(ValueError, match="name"):
        quality.build_arm("nope", tiny_llama(config), "qa")
    with pytest.raises(ValueError, match="task"):
        quality.build_arm("pt", tiny_llama(config), "poetry")


def test_lora_arm_has_more_parameters_than_ptmoe():
    pytest.importorskip("peft", reason="peft (the 'peers' extra) is not installed")
    config = tiny_llama_config(hidden_size=64, num_layers=2, num_heads=4)
    _, info = quality.build_arm("peft_lora", tiny_llama(config), "qa")
    # r = round(1.2 · 2560 / 512) = 6 on q_proj and v_proj of two layers: 6 · 512.
    assert info["trainable"] == 3072 and info["size"].startswith("r=6")


def test_mean_ci_student_t():
    mean, half = quality.mean_ci([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6)
    assert half == pytest.approx(4.302652729911275 * 0.1 / 3**0.5)
    assert quality.mean_ci([0.25]) == (0.25, 0.0)
    with pytest.raises(ValueError, match="values"):
        quality.mean_ci([])


def test_svd_init_uses_the_task_description():
    """PT-MoE, PT and DPT start from the task description's byte embeddings (rank-R for DPT)."""
    config = tiny_llama_config(hidden_size=64, num_layers=1, num_heads=4)
    base = tiny_llama(config)
    model, _ = quality.build_arm("pt", base, "qa")
    ids = torch.tensor(list(quality.INIT_TEXT["qa"].encode()))[:40]
    expected = base.get_input_embeddings().weight[ids]
    torch.testing.assert_close(model.prompt_encoder.prompt.detach(), expected)


def test_arm_init_depends_on_the_seed_only():
    """The router's init comes from ``seed``, whatever the global RNG did before."""
    config = tiny_llama_config(hidden_size=32, num_layers=1, num_heads=4)
    inits = []
    for before in (0, 1):
        torch.manual_seed(before)
        torch.randn(7)  # other work in the same process
        model, _ = quality.build_arm("ptmoe", tiny_llama(config), "qa", seed=3)
        inits.append(model.prompt_encoder.router.weight.detach().clone())
    torch.testing.assert_close(inits[0], inits[1], rtol=0, atol=0)
    other, _ = quality.build_arm("ptmoe", tiny_llama(config), "qa", seed=4)
    assert not torch.equal(other.prompt_encoder.router.weight, inits[0])
