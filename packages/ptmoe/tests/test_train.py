"""Prompt training (fit) and greedy evaluation on byte-level task data."""

from __future__ import annotations

import pytest
import torch
from ptmoe import PTMoEConfig, get_peft_model
from ptmoe.tasks import f1_score, math_examples, qa_examples
from ptmoe.train import encode_batch, evaluate, fit, target_text
from transformers import LlamaConfig, LlamaForCausalLM


def byte_llama():
    # A wide init (0.3) so a prompt can move a random model's outputs within a few steps.
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.3,
    )
    return LlamaForCausalLM(config).eval()


def test_encode_batch_layout():
    ex = qa_examples(["city", "two_hop"], 2, seed=0)
    b = encode_batch(ex)
    for i, e in enumerate(ex):
        n_src, n_ans = len(e.source.encode()), len(e.answer.encode()) + 2
        assert b["attention_mask"][i].sum() == n_src + n_ans
        assert (b["labels"][i, :n_src] == -100).all()
        assert (
            bytes(b["labels"][i, n_src : n_src + n_ans].tolist()).decode() == " " + e.answer + "\n"
        )
        assert (b["labels"][i, n_src + n_ans :] == -100).all()
    g = encode_batch(ex, with_answers=False, left_pad=True)
    assert (g["attention_mask"][:, -1] == 1).all() and (g["labels"] == -100).all()
    assert bytes(g["input_ids"][0][g["attention_mask"][0].bool()].tolist()).decode() == ex[0].source
    m = math_examples(["add"], 1)[0]  # solutions start with a space already: no second one
    assert target_text(m.answer) == m.answer + "\n" and m.answer.startswith(" ")
    with pytest.raises(ValueError, match="examples: expected at least one"):
        encode_batch([])


def test_fit_lowers_the_loss_even_under_no_grad_and_leaves_the_base_unchanged():
    base = byte_llama()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    model = get_peft_model(base, PTMoEConfig(prompt_length=8, num_experts=2, rank=6))
    with torch.no_grad():
        losses = fit(
            model, qa_examples(["city"], 4), steps=60, lr=1e-1, batch_size=4, progress=False
        )
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0, (losses[:5], losses[-5:])
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert not model.training
    with pytest.raises(ValueError, match="steps: expected a positive int"):
        fit(model, qa_examples(["city"], 4), steps=0, lr=1e-2)
    with pytest.raises(ValueError, match="lr: expected > 0"):
        fit(model, qa_examples(["city"], 4), steps=1, lr=0.0)


def test_evaluate_scores_what_generate_decodes():
    model = get_peft_model(byte_llama(), PTMoEConfig(prompt_length=8, num_experts=2, rank=6))
    ex = qa_examples(["city", "colour", "inverse"], 6, seed=4)
    scores = evaluate(model, ex, batch_size=4, max_new_tokens=6)
    assert set(scores) == {"city", "colour", "inverse", "all"}
    manual = []
    for e in ex:  # one at a time, no padding
        ids = torch.tensor([list(e.source.encode())])
        out = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
        text = bytes(out[0, ids.shape[1] :].tolist()).decode("utf-8", "replace").split("\n")[0]
        manual.append(f1_score(text, e.answer))
    assert scores["all"]["f1"] == pytest.approx(sum(manual) / len(manual))
    math = evaluate(model, math_examples(["add"], 3), metric="math", max_new_tokens=4)
    assert 0.0 <= math["all"]["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="metric: expected 'qa' or 'math'"):
        evaluate(model, ex, metric="bleu")


def test_fit_and_evaluate_drive_peft_models_too():
    peft = pytest.importorskip("peft", reason="peft (the `peers` extra) is not installed")
    model = peft.get_peft_model(
        byte_llama(), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=8)
    )
    losses = fit(model, qa_examples(["city"], 4), steps=60, lr=1e-1, batch_size=4, progress=False)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert set(evaluate(model, qa_examples(["city"], 2), max_new_tokens=4)) == {"city", "all"}
